//! Moving a tensor's data between the host and its buffer: writes, reads and
//! zeroing, each refused for a tensor that is not allocated, not contiguous,
//! or an intermediate result whose memory a graph shares with other nodes.

use super::Tensor;
use crate::dtype::Element;
use crate::error::Result;
use ggml_sys as sys;

impl Tensor<'_> {
    /// True for an op result with memory from a graph's compute buffer whose
    /// graph has not yet run: its memory holds no result.
    fn is_uncomputed(&self) -> bool {
        self.is_graph_result() && !crate::graph::is_computed(self.root().buffer)
    }

    fn check_io(&self, op: &'static str, bytes: usize) -> Result<()> {
        if !self.is_allocated() {
            return Err(self.err(format!("{op}: not allocated (allocate its context, or the graph that computes it, first)")));
        }
        if self.is_scratch() {
            return Err(self.err(if op == "read" {
                "read: an intermediate result whose memory the graph reuses for later nodes; \
                 mark it with set_output() before allocating the graph"
                    .to_string()
            } else {
                format!(
                    "{op}: an intermediate result whose memory the graph shares with other nodes (an output's, \
                     perhaps), and that its compute overwrites; write the graph's inputs instead"
                )
            }));
        }
        if op == "read" && self.is_uncomputed() {
            return Err(self.err("read: its graph has not run yet (compute it first)".to_string()));
        }
        if !self.is_contiguous() {
            return Err(self.err(format!("{op}: not contiguous (use cont first)")));
        }
        if bytes != self.nbytes() {
            return Err(self.err(format!("{op}: {bytes} bytes given for a tensor of {} bytes", self.nbytes())));
        }
        Ok(())
    }

    /// Copy raw bytes into the tensor (`ggml_backend_tensor_set`); `data` must
    /// hold exactly [`nbytes`](Self::nbytes).
    pub fn write_bytes(&self, data: &[u8]) -> Result<()> {
        self.check_io("write", data.len())?;
        let root = self.root() as *const sys::ggml_tensor as *mut sys::ggml_tensor;
        // SAFETY: allocated, contiguous, size checked; root buffer is live.
        unsafe { sys::ggml_backend_tensor_set(root, data.as_ptr().cast(), self.root_offset(), data.len()) };
        Ok(())
    }

    /// Copy the tensor's bytes out (`ggml_backend_tensor_get`).
    pub fn read_bytes(&self) -> Result<Vec<u8>> {
        let n = self.nbytes();
        self.check_io("read", n)?;
        let mut out = vec![0u8; n];
        let root = self.root() as *const sys::ggml_tensor;
        // SAFETY: allocated, contiguous; root buffer is live.
        unsafe { sys::ggml_backend_tensor_get(root, out.as_mut_ptr().cast(), self.root_offset(), n) };
        Ok(out)
    }

    /// Write `data` (same element type, exactly [`nelements`](Self::nelements) values).
    pub fn write<T: Element>(&self, data: &[T]) -> Result<()> {
        if self.dtype() != T::DTYPE {
            return Err(self.err(format!("write: tensor is {}, data is {}", self.dtype(), T::DTYPE)));
        }
        if data.len() as i64 != self.nelements() {
            return Err(self.err(format!("write: {} values for {} elements", data.len(), self.nelements())));
        }
        // SAFETY: plain-old-data element types.
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) };
        self.write_bytes(bytes)
    }

    /// Write `data` into the elements `[first, first + data.len())` of the
    /// tensor, in its memory order (same element type), leaving the others as
    /// they are (`ggml_backend_tensor_set` at an offset): a large tensor
    /// filled in pieces, without a host copy of it whole.
    ///
    /// # Errors
    /// [`Error::Tensor`] when `T` is not the tensor's type, the range passes
    /// the tensor's last element, or the tensor is not allocated or not
    /// contiguous.
    pub fn write_range<T: Element>(&self, first: usize, data: &[T]) -> Result<()> {
        if self.dtype() != T::DTYPE {
            return Err(self.err(format!("write_range: tensor is {}, data is {}", self.dtype(), T::DTYPE)));
        }
        let n = self.nelements() as usize;
        if first.checked_add(data.len()).is_none_or(|end| end > n) {
            return Err(self.err(format!("write_range: {} values from element {first} pass the tensor's {n}", data.len())));
        }
        self.check_io("write", self.nbytes())?;
        // SAFETY: plain-old-data element types.
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) };
        let root = self.root() as *const sys::ggml_tensor as *mut sys::ggml_tensor;
        let offset = self.root_offset() + first * std::mem::size_of::<T>();
        // SAFETY: allocated, contiguous, the range checked against the tensor; root buffer is live.
        unsafe { sys::ggml_backend_tensor_set(root, bytes.as_ptr().cast(), offset, bytes.len()) };
        Ok(())
    }

    /// Read the data as a vector of its element type.
    ///
    /// # Errors
    /// [`Error::Tensor`] when `T` is not the tensor's type, the tensor is not
    /// allocated or not contiguous, or it is an intermediate result of a graph
    /// that was not marked with [`set_output`](Self::set_output) before the
    /// graph was allocated (its memory is reused by later nodes), or a result
    /// of a graph that has not yet run.
    pub fn read<T: Element>(&self) -> Result<Vec<T>> {
        if self.dtype() != T::DTYPE {
            return Err(self.err(format!("read: tensor is {}, asked for {}", self.dtype(), T::DTYPE)));
        }
        let bytes = self.read_bytes()?;
        let mut out = vec![T::default(); self.nelements() as usize];
        // SAFETY: sizes match (nbytes == nelements * size_of::<T>() for plain types).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_mut_ptr().cast::<u8>(), bytes.len()) };
        Ok(out)
    }

    /// Read the data converted to f32 (any type ggml can convert, quantized included).
    pub fn read_f32(&self) -> Result<Vec<f32>> {
        let bytes = self.read_bytes()?;
        self.dtype().to_f32(&bytes, self.nelements() as usize)
    }

    /// The single value of a one-element f32 tensor (a loss).
    pub fn scalar(&self) -> Result<f32> {
        if self.nelements() != 1 {
            return Err(self.err("scalar: not a one-element tensor"));
        }
        Ok(self.read_f32()?[0])
    }

    /// Set every byte to zero.
    pub fn zero(&self) -> Result<()> {
        let n = self.nbytes();
        self.check_io("zero", n)?;
        let root = self.root() as *const sys::ggml_tensor as *mut sys::ggml_tensor;
        // SAFETY: allocated, contiguous.
        unsafe { sys::ggml_backend_tensor_memset(root, 0, self.root_offset(), n) };
        Ok(())
    }
}
