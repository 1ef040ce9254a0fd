//! `DType::quantize` (ggml_quantize_chunk) against `DType::to_f32`: each
//! type's round trip stays within its known error, and bad row lengths and
//! types without a converter are errors, not ggml asserts.

use crate::common::*;
use ggml_rs::DType;

#[test]
fn round_trips_within_each_types_error() {
    let mut r = rng(7100);
    let (rows, n) = (6usize, 512usize);
    let x = uniform(&mut r, rows * n, -2.0, 2.0);
    // Largest error relative to max |x| (2): f16 rounds at 2^-11, q8_0 at half
    // of 1/127 of a block's max, the 4- to 6-bit types at half a step of their
    // 15 to 63 levels (k-quants also round their block scales); bounds with
    // margin over what ggml gives on this seeded data.
    for (dtype, tol) in [
        (DType::F32, 0.0),
        (DType::F16, 1e-3),
        (DType::BF16, 4e-3),
        (DType::Q8_0, 1e-2),
        (DType::Q6K, 3e-2),
        (DType::Q5K, 6e-2),
        (DType::Q4K, 1.2e-1),
        (DType::Q4_0, 1.5e-1),
        (DType::Q4_1, 1.2e-1),
    ] {
        let q = dtype.quantize(&x, n).unwrap();
        assert_eq!(q.len(), rows * dtype.row_size(n as i64), "{dtype}");
        let back = dtype.to_f32(&q, x.len()).unwrap();
        let err = x.iter().zip(&back).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max) / 2.0;
        println!("{dtype}: max error {err:.2e} of max |x|");
        assert!(err <= tol, "{dtype}: {err}");
        if dtype != DType::F32 {
            assert!(err > 0.0, "{dtype} rounds something");
        }
    }
}

#[test]
fn refuses_what_ggml_would_assert_on() {
    let x = vec![1.0f32; 96];
    assert!(DType::Q8_0.quantize(&x, 48).unwrap_err().to_string().contains("blocks of 32"));
    assert!(DType::Q8_0.quantize(&x, 64).is_err(), "64 does not divide 96");
    assert!(DType::Q4K.quantize(&x, 96).is_err(), "k-quants need rows of 256");
    assert!(DType::I32.quantize(&x, 32).is_err());
    assert!(DType::Q8_0.quantize(&x, 0).is_err());
    assert_eq!(DType::Q8_0.quantize(&x, 32).unwrap().len(), 3 * 34);
}
