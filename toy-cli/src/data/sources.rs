//! Text inputs as a stream of documents, read in bounded pieces: plain UTF-8
//! text (documents separated by lines that are exactly `<|endoftext|>`, each
//! file ending one), JSON Lines with a string field per record (one document
//! each, as Hugging Face `datasets` exports), folders of such files, and their
//! gzip-compressed versions (`.gz`).
//!
//! A document longer than [`PIECE_BYTES`] comes in several pieces, cut only
//! just after a `\n` that has non-whitespace on both sides: the `ByteLevel`
//! pre-tokenizer makes such a newline a piece of its own, so tokenizing the
//! pieces one by one gives the document's ids (see `text::cut_points`). A
//! stretch of [`MAX_UNCUT_BYTES`] without such a newline is cut anyway
//! (`text::fallback_cut`), so no piece is larger.

use super::text::MAX_UNCUT_BYTES;
use super::tokenizer::EOT;
use crate::error::{input, Result};
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// What a chat record met where text is read is told to do (the finetune
/// recipe's reading; `toy train`'s other recipes replace it with their own).
pub const CHAT_ADVICE: &str =
    "read it as chat (--data-format auto or chat) with a model whose chat template renders it (a GGUF that has tokenizer.chat_template)";

/// `e` with [`CHAT_ADVICE`] replaced by `instead`: what a command that reads
/// text alone (`toy prep`, the from-scratch and warm-start recipes) says of a
/// chat record; other errors as they are.
pub fn chat_refused(e: crate::error::Error, instead: &str) -> crate::error::Error {
    match e {
        crate::error::Error::Input(m) if m.contains(CHAT_ADVICE) => {
            crate::error::Error::Input(format!("{}{instead}", &m[..m.find(CHAT_ADVICE).unwrap_or(m.len())]))
        }
        e => e,
    }
}

pub use super::discover::discover;

/// Documents are handed out in pieces of about this many bytes at most (half
/// of [`MAX_UNCUT_BYTES`], so that what is left at a document's end is no more
/// than that).
pub const PIECE_BYTES: usize = MAX_UNCUT_BYTES / 2;

/// How a file's records are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Lines of text, `<|endoftext|>` lines between documents.
    Text,
    /// One JSON object per line; the document is its `text_field`.
    JsonLines,
}

/// One input file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub path: PathBuf,
    pub format: Format,
    /// Compressed with gzip.
    pub gzip: bool,
    /// Size on disk.
    pub bytes: u64,
}

/// The format of `path` from its name: `x.jsonl` / `x.ndjson` / `x.json`
/// (and `.gz` of them) are JSON Lines, anything else text. (Datasets often
/// name JSON Lines `.json`; a `.json` file that holds one JSON array is
/// refused by [`json_record`] with the command that converts it.)
pub fn format_of(path: &Path) -> (Format, bool) {
    let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    let (stem, gzip) = match name.strip_suffix(".gz") {
        Some(s) => (s.to_string(), true),
        None => (name, false),
    };
    let json = [".jsonl", ".ndjson", ".json"].iter().any(|e| stem.ends_with(e));
    (if json { Format::JsonLines } else { Format::Text }, gzip)
}

/// `r` read as text: through gzip's decoder when `gzip` (a `.gz` name, see
/// [`format_of`]), buffered either way.
pub fn decoded<R: Read + 'static>(r: R, gzip: bool) -> Box<dyn BufRead> {
    if gzip {
        Box::new(BufReader::with_capacity(1 << 16, flate2::read::MultiGzDecoder::new(BufReader::with_capacity(1 << 16, r))))
    } else {
        Box::new(BufReader::with_capacity(1 << 16, r))
    }
}

/// What a read error in a file of a `.gz` name adds (`gzip`), or nothing.
pub fn gzip_hint(gzip: bool) -> &'static str {
    if gzip {
        " (a .gz name: not gzip data, or cut short?)"
    } else {
        ""
    }
}

/// One line of a JSON Lines file (`at` is its `file:line`) as a JSON value:
/// an error names the line, and a file that is one JSON array (a `.json`
/// dataset rather than JSON Lines) says how to convert it.
pub fn json_record(at: &str, line: &str) -> crate::error::Result<serde_json::Value> {
    if line.trim_start().starts_with('[') {
        return Err(input(format!(
            "{at}: a JSON array, not a record: toy reads JSON Lines, one object per line (convert with jq -c '.[]' FILE > FILE.jsonl)"
        )));
    }
    // Without its line end: the parser's position then stays on this line.
    serde_json::from_str(line.trim_end_matches(['\n', '\r'])).map_err(|e| {
        if e.is_eof() && line.trim() == "{" {
            // a pretty-printed JSON document (a .json file's settings or dataset)
            return input(format!(
                "{at}: a JSON object spread over lines: toy reads JSON Lines, one object per line (convert with jq -c . FILE > FILE.jsonl)"
            ));
        }
        input(format!("{at}: not a JSON object ({e})"))
    })
}

/// A piece of a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// 0-based index of its document in the whole input.
    pub doc: usize,
    pub text: String,
    /// The document's last piece.
    pub last: bool,
}

/// Counts the raw (on-disk) bytes read and hashes them.
struct Tap<R> {
    inner: R,
    hasher: Sha256,
    bytes: u64,
    counter: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl<R: Read> Read for Tap<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        self.counter.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

/// What was read of one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileDigest {
    pub path: PathBuf,
    /// Bytes on disk.
    pub bytes: u64,
    /// Hex SHA-256 of the bytes on disk.
    pub sha256: String,
}

/// The documents of a list of sources, piece by piece.
pub struct Documents<'s> {
    sources: &'s [Source],
    text_field: String,
    next_source: usize,
    reader: Option<(Box<dyn BufRead + 's>, usize)>,
    /// Where the current line comes from, for messages.
    line_no: usize,
    /// The line of the current JSON Lines file's first record, once read.
    first_record: Option<usize>,
    /// Inside a long line of a text file (see `line`), and the bytes of a
    /// character that the last part cut.
    mid_line: bool,
    carry: Vec<u8>,
    doc: usize,
    /// The document being gathered (text format), and whether a piece of it was handed out.
    pending: String,
    /// `pending` has no safe cut before this offset (searched already: a
    /// document of lines that all end in a space, say, is not searched again
    /// from its start after every line it grows by).
    searched: usize,
    started: bool,
    /// `pending` holds a whole JSON Lines record, to hand out (in pieces if long).
    record_done: bool,
    /// Raw bytes read so far, over all sources (for progress).
    pub bytes_read: std::sync::Arc<std::sync::atomic::AtomicU64>,
    digests: Vec<FileDigest>,
    tap: Option<DigestCell>,
}

/// Where a finished source leaves its hash and byte count.
type DigestCell = std::rc::Rc<std::cell::RefCell<Option<(Sha256, u64)>>>;

/// A reader that reports its hash and count into a shared cell when dropped.
struct Reporting<R: Read> {
    tap: Tap<R>,
    out: DigestCell,
}

impl<R: Read> Read for Reporting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.tap.read(buf)
    }
}

impl<R: Read> Drop for Reporting<R> {
    fn drop(&mut self) {
        let h = std::mem::take(&mut self.tap.hasher);
        *self.out.borrow_mut() = Some((h, self.tap.bytes));
    }
}

impl<'s> Documents<'s> {
    /// Read `sources` in order; JSON Lines records give their `text_field`.
    pub fn new(sources: &'s [Source], text_field: &str) -> Documents<'s> {
        Documents {
            sources,
            text_field: text_field.to_string(),
            next_source: 0,
            reader: None,
            line_no: 0,
            first_record: None,
            mid_line: false,
            carry: Vec::new(),
            doc: 0,
            pending: String::new(),
            searched: 0,
            started: false,
            record_done: false,
            bytes_read: Default::default(),
            digests: Vec::new(),
            tap: None,
        }
    }

    /// Size and SHA-256 of every file read to its end so far.
    pub fn digests(&self) -> &[FileDigest] {
        &self.digests
    }

    /// Documents started so far.
    pub fn documents(&self) -> usize {
        self.doc
    }

    fn open(&mut self, i: usize) -> Result<()> {
        let s = &self.sources[i];
        let file = std::fs::File::open(&s.path).map_err(|e| input(format!("cannot read {}: {e}", s.path.display())))?;
        let cell = std::rc::Rc::new(std::cell::RefCell::new(None));
        let tap = Tap { inner: file, hasher: Sha256::new(), bytes: 0, counter: self.bytes_read.clone() };
        let raw = Reporting { tap, out: cell.clone() };
        let r = decoded(raw, s.gzip);
        self.reader = Some((r, i));
        self.tap = Some(cell);
        self.line_no = 0;
        self.first_record = None;
        self.mid_line = false;
        self.carry.clear();
        Ok(())
    }

    fn close(&mut self) {
        if let Some((r, i)) = self.reader.take() {
            drop(r); // reports the file's hash and size into the cell
            if let Some((h, bytes)) = self.tap.take().and_then(|c| c.borrow_mut().take()) {
                self.digests.push(FileDigest { path: self.sources[i].path.clone(), bytes, sha256: super::tokenizer::hex(&h.finalize()) });
            }
        }
    }

    /// The next line of the current file (with its `\n`), or None at its end.
    /// A line of a text file longer than [`PIECE_BYTES`] comes in parts (false
    /// beside every part but the first), so that one line without a newline
    /// never has to fit in memory whole; a JSON Lines record comes whole.
    fn line(&mut self) -> Result<Option<(String, bool)>> {
        let Some((r, i)) = self.reader.as_mut() else { return Ok(None) };
        let path = &self.sources[*i].path;
        let text = self.sources[*i].format == Format::Text;
        let mut buf = std::mem::take(&mut self.carry);
        let limit = if text { PIECE_BYTES as u64 } else { u64::MAX };
        let gzip = self.sources[*i].gzip;
        let n = r
            .by_ref()
            .take(limit)
            .read_until(b'\n', &mut buf)
            .map_err(|e| input(format!("cannot read {}: {e}{}", path.display(), gzip_hint(gzip))))?;
        if buf.is_empty() {
            return Ok(None);
        }
        let first_part = !self.mid_line;
        self.mid_line = n as u64 == limit && !buf.ends_with(b"\n");
        if first_part {
            self.line_no += 1;
        }
        // A byte order mark is not text: at the start of a file or of a JSON Lines record.
        let bom = "\u{feff}".as_bytes();
        if first_part && (self.line_no == 1 || !text) && buf.starts_with(bom) {
            buf.drain(..bom.len());
        }
        if self.mid_line {
            // A character cut by the read limit goes with the next part.
            if let Err(e) = std::str::from_utf8(&buf) {
                if e.error_len().is_none() {
                    self.carry = buf.split_off(e.valid_up_to());
                }
            }
        }
        String::from_utf8(buf).map(|l| Some((l, first_part))).map_err(|e| {
            input(format!(
                "{}:{}: not UTF-8 text (invalid byte at column {})",
                path.display(),
                self.line_no,
                e.utf8_error().valid_up_to() + 1
            ))
        })
    }

    /// The pending text as a piece: trimmed at the start when it is a document's
    /// first piece, at the end when it is its last; None when that leaves nothing.
    fn emit(&mut self, last: bool) -> Option<Piece> {
        let mut text = std::mem::take(&mut self.pending);
        self.searched = 0;
        if last {
            text.truncate(text.trim_end().len());
        }
        if !self.started {
            let start = text.len() - text.trim_start().len();
            text.drain(..start);
        }
        if text.is_empty() && !(last && self.started) {
            self.started = self.started && !last;
            return None;
        }
        let doc = self.doc;
        self.started = !last;
        if last {
            self.doc += 1;
        }
        Some(Piece { doc, text, last })
    }

    /// A long pending document: hand out everything up to its last safe cut
    /// within [`MAX_UNCUT_BYTES`], or up to `text::fallback_cut` when it has
    /// gone on that long without one (None: wait for more text).
    fn cut(&mut self) -> Option<Piece> {
        let len = self.pending.len();
        let at = match super::text::last_between(&self.pending, b'\n', self.searched.max(1), MAX_UNCUT_BYTES) {
            Some(i) => i + 1,
            None if len > MAX_UNCUT_BYTES => super::text::fallback_cut(&self.pending, 0, MAX_UNCUT_BYTES),
            None => {
                // Every newline before the last byte has both its neighbours: none is a cut.
                self.searched = len.saturating_sub(1).min(MAX_UNCUT_BYTES);
                return None;
            }
        };
        let rest = self.pending.split_off(at);
        // The piece keeps the buffer that held the whole pending text (megabytes, one
        // line's reads): cut down to its own length, or a batch (or BPE sample) of
        // 64 KiB pieces of a line without newlines held ~3 MB each.
        self.pending.shrink_to_fit();
        let piece = self.emit(false);
        (self.pending, self.searched) = (rest, 0);
        piece
    }

    fn next_piece(&mut self) -> Result<Option<Piece>> {
        loop {
            // A line can bring more than one piece's worth (one long line).
            if self.pending.len() > PIECE_BYTES {
                if let Some(p) = self.cut() {
                    return Ok(Some(p));
                }
            }
            if self.record_done {
                self.record_done = false;
                if let Some(p) = self.emit(true) {
                    return Ok(Some(p));
                }
                continue;
            }
            if self.reader.is_none() {
                if self.next_source >= self.sources.len() {
                    return Ok(None);
                }
                let i = self.next_source;
                self.next_source += 1;
                self.open(i)?;
            }
            let format = self.sources[self.reader.as_ref().map(|r| r.1).unwrap_or(0)].format;
            match self.line()? {
                None => {
                    // A file ends its last document.
                    self.close();
                    if format == Format::Text {
                        if let Some(p) = self.emit(true) {
                            return Ok(Some(p));
                        }
                    }
                }
                Some((line, _)) if format == Format::JsonLines => {
                    if line.trim().is_empty() {
                        continue;
                    }
                    let i = self.reader.as_ref().map(|r| r.1).unwrap_or(0);
                    let at = format!("{}:{}", self.sources[i].path.display(), self.line_no);
                    let v = json_record(&at, &line)?;
                    let (prompt, completion) = (v.get("prompt").is_some(), v.get("completion").is_some());
                    let conversation = v.get("messages").is_some()
                        || v.get("conversations").is_some()
                        || (v.get("instruction").is_some() && v.get("output").is_some());
                    let first = *self.first_record.get_or_insert(self.line_no);
                    let text = v.get(&self.text_field).ok_or_else(|| match (conversation, prompt, completion) {
                        // After text records: the file mixes the two kinds.
                        (true, _, _) | (_, true, true) if first < self.line_no => input(format!(
                            "{at}: a chat record in a file whose first record (line {first}) is text; a file holds chat records or text, not both"
                        )),
                        (true, _, _) | (_, true, true) => input(format!(
                            "{at}: a chat record (messages, conversations, prompt and completion, or instruction and output), not text with a field {:?}: {CHAT_ADVICE}",
                            self.text_field
                        )),
                        (_, true, false) | (_, false, true) => {
                            input(format!("{at}: a prompt-completion record needs both \"prompt\" and \"completion\""))
                        }
                        _ => input(format!("{at}: no field {:?} (choose one with --text-field)", self.text_field)),
                    })?
                        .as_str()
                        .ok_or_else(|| input(format!("{at}: field {:?} is not a string", self.text_field)))?;
                    (self.pending, self.searched) = (text.to_string(), 0);
                    self.started = false;
                    // Handed out at the top of the loop, in pieces if long.
                    self.record_done = true;
                }
                Some((line, first_part)) => {
                    if first_part && line.trim_end_matches('\n').trim_end_matches('\r') == EOT {
                        if let Some(p) = self.emit(true) {
                            return Ok(Some(p));
                        }
                        continue;
                    }
                    self.pending.push_str(&line);
                }
            }
        }
    }
}

impl Iterator for Documents<'_> {
    type Item = Result<Piece>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_piece().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn docs(sources: &[Source]) -> Vec<(usize, String, bool)> {
        Documents::new(sources, "text").map(|p| p.map(|p| (p.doc, p.text, p.last))).collect::<Result<_>>().unwrap()
    }

    fn file(dir: &Path, name: &str, bytes: &[u8]) -> Source {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        discover(&[p]).unwrap().remove(0)
    }

    #[test]
    fn text_documents_as_split_documents_gives_them() {
        let d = tempfile::tempdir().unwrap();
        let t = "  one\ntwo\n<|endoftext|>\n\n<|endoftext|>\r\nthree <|endoftext|>\n<|endoftext|>\n";
        let s = file(d.path(), "a.txt", t.as_bytes());
        let got: Vec<String> = docs(&[s]).into_iter().map(|x| x.1).collect();
        assert_eq!(got, super::super::text::split_documents(t));
    }

    #[test]
    fn jsonl_gzip_and_folders() {
        let d = tempfile::tempdir().unwrap();
        let j = file(d.path(), "x.jsonl", b"{\"text\": \" first \"}\n\n{\"text\": \"second\\nline\", \"id\": 3}\n");
        assert_eq!(docs(&[j]), vec![(0, "first".into(), true), (1, "second\nline".into(), true)]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"a\n<|endoftext|>\nb\n").unwrap();
        let g = file(d.path(), "y.txt.gz", &gz.finish().unwrap());
        assert!(g.gzip && g.format == Format::Text);
        assert_eq!(docs(&[g]), vec![(0, "a".into(), true), (1, "b".into(), true)]);
        let all = discover(&[d.path().to_path_buf()]).unwrap();
        assert_eq!(all.len(), 2);
        let bad = file(d.path(), "z.jsonl", b"{\"text\": \"ok\"}\n{\"text\": 5}\n");
        let e = Documents::new(&[bad], "text").collect::<Result<Vec<_>>>().unwrap_err().to_string();
        assert!(e.contains("z.jsonl:2") && e.contains("not a string"), "{e}");
        // Datasets name JSON Lines `.json` too; a `.json` array is refused with a way out.
        let j = file(d.path(), "w.json", b"{\"text\": \"third\"}\n");
        assert_eq!(j.format, Format::JsonLines);
        assert_eq!(docs(&[j]), vec![(0, "third".into(), true)]);
        let arr = file(d.path(), "v.json", b"[{\"text\": \"a\"},\n{\"text\": \"b\"}]\n");
        let e = Documents::new(&[arr], "text").collect::<Result<Vec<_>>>().unwrap_err().to_string();
        assert!(e.contains("v.json:1") && e.contains("JSON array") && e.contains("jq -c"), "{e}");
    }

    #[test]
    fn long_documents_come_in_pieces_at_safe_cuts() {
        let d = tempfile::tempdir().unwrap();
        let line = "word ".repeat(40) + "end\n";
        let text = line.repeat(PIECE_BYTES / line.len() * 3);
        let s = file(d.path(), "long.txt", text.as_bytes());
        let got = docs(&[s]);
        assert!(got.len() >= 3, "{} pieces", got.len());
        assert!(got.iter().all(|p| p.0 == 0));
        assert!(got[..got.len() - 1].iter().all(|p| !p.2) && got.last().unwrap().2);
        let joined: String = got.iter().map(|p| p.1.as_str()).collect();
        assert_eq!(joined, text.trim());
    }

    /// One line (text) or record (JSON Lines) of several MiB without a newline
    /// comes in pieces of at most `MAX_UNCUT_BYTES` (a 200 MB line took 21 GB
    /// in the tokenizer), cut before a space where there is one.
    #[test]
    fn one_huge_line_comes_in_bounded_pieces() {
        let d = tempfile::tempdir().unwrap();
        let words = "word ".repeat(MAX_UNCUT_BYTES * 2 / 5) + "end";
        let solid = "a".repeat(MAX_UNCUT_BYTES * 2 + 7);
        let record = format!("{{\"text\": \"{solid}\"}}\n");
        for (name, bytes, want) in [("w.txt", words.clone(), words.as_str()), ("s.txt", solid.clone(), &solid), ("r.jsonl", record, &solid)]
        {
            let got = docs(&[file(d.path(), name, bytes.as_bytes())]);
            assert!(got.len() >= 3 && got.iter().all(|p| p.1.len() <= MAX_UNCUT_BYTES), "{name}: {} pieces", got.len());
            assert!(got.iter().all(|p| p.0 == 0) && got.last().unwrap().2, "{name}");
            assert_eq!(got.iter().map(|p| p.1.as_str()).collect::<String>(), want, "{name}");
            // Each piece holds its own text, not the buffer of the whole pending line
            // (a batch of 64 KiB pieces held ~3 MB each).
            assert!(got.iter().all(|p| p.1.capacity() <= 2 * p.1.len() + 64), "{name}: a piece keeps a larger buffer");
        }
    }

    /// A bad record's position is within its own line, as `toy train` says it.
    #[test]
    fn a_bad_record_names_its_own_line() {
        let e = json_record("a.jsonl:1", "{\"text\": \"fine\"\n").unwrap_err().to_string();
        assert!(e.starts_with("a.jsonl:1: not a JSON object") && e.contains("line 1 column 15"), "{e}");
        // a pretty-printed document (a .json file's first line)
        let e = json_record("m.json:1", "{\n").unwrap_err().to_string();
        assert!(e.starts_with("m.json:1: a JSON object spread over lines") && e.contains("one object per line"), "{e}");
    }
}
