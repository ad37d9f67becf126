//! Images named by dataset rows (ShareGPT4V / LLaVA style): which rows name which files, and
//! the check of each file at validation (it exists, is at most `MAX_IMAGE_BYTES`, and its
//! magic bytes say JPEG or PNG; its header gives its size in pixels).
//!
//! A row names its images by `"image": "coco/000123.jpg"` (or an array of paths), as ShareGPT4V
//! and LLaVA ship them, or by chat content parts `{"type": "image_url", "image_url": {"url":
//! "coco/000123.jpg"}}` whose URL is a relative path. Paths are relative to the dataset file.
//! The files are read again and encoded before the first level (`request::workload::dataset_media`).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::ImageFormat;

/// Largest image file a dataset row may name (OpenAI's limit per image).
pub const MAX_IMAGE_BYTES: u64 = 20 << 20;

/// The fix of every error about a dataset's image file.
pub const FIX: &str = "make each image path name a JPEG or PNG file (at most 20 MiB), relative to the dataset \
                       file, or remove the row";

/// One checked image file of a dataset row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetImage {
    /// The file, resolved against the dataset's folder.
    pub path: PathBuf,
    pub format: ImageFormat,
    pub width: u32,
    pub height: u32,
    /// The file's size.
    pub bytes: u64,
}

/// The image paths a row names in its `image` key (a string or an array of strings).
pub fn image_key(v: &Value) -> Result<Vec<String>, String> {
    match v.get("image") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| i.as_str().map(str::to_string).ok_or_else(|| "\"image\" holds a value that is not a path".into()))
            .collect(),
        Some(_) => Err("\"image\" must be a path or an array of paths".to_string()),
    }
}

/// Chat content given as parts: the text parts joined, and the `image_url` parts' URLs.
pub fn content_parts(parts: &[Value]) -> Result<(String, Vec<String>), String> {
    let mut text = String::new();
    let mut images = Vec::new();
    for p in parts {
        match p.get("type").and_then(Value::as_str) {
            Some("text") => {
                let t = p.get("text").and_then(Value::as_str).ok_or("a text part has no string \"text\"")?;
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(t);
            }
            Some("image_url") => {
                let url = p.get("image_url").and_then(|u| u.get("url").or(Some(u))).and_then(Value::as_str);
                images.push(url.ok_or("an image_url part has no string \"url\"")?.to_string());
            }
            other => return Err(format!("a content part of type {other:?} is not text or image_url")),
        }
    }
    Ok((text, images))
}

/// Checks the file `name` (relative to `dir`): readable, at most `MAX_IMAGE_BYTES`, a JPEG or
/// PNG whose header gives its size. The error names the path.
pub fn check(dir: &Path, name: &str) -> Result<DatasetImage, String> {
    let shown = format!("image \"{name}\"");
    if name.contains("://") || name.starts_with("data:") {
        return Err(format!("{shown}: is a URL, not a path to a local file"));
    }
    let path = dir.join(name);
    let meta = std::fs::metadata(&path).map_err(|e| format!("{shown} ({}): cannot read it: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{shown} ({}): is not a file", path.display()));
    }
    if meta.len() > MAX_IMAGE_BYTES {
        return Err(format!("{shown} ({}): {} bytes, more than {MAX_IMAGE_BYTES}", path.display(), meta.len()));
    }
    let bytes = std::fs::read(&path).map_err(|e| format!("{shown} ({}): cannot read it: {e}", path.display()))?;
    let (format, width, height) =
        sniff(&bytes).ok_or_else(|| format!("{shown} ({}): is not a JPEG or PNG image", path.display()))?;
    Ok(DatasetImage { path, format, width, height, bytes: bytes.len() as u64 })
}

/// The format and size of a JPEG (its first SOF marker) or PNG (its IHDR).
pub fn sniff(b: &[u8]) -> Option<(ImageFormat, u32, u32)> {
    if b.starts_with(b"\x89PNG\r\n\x1a\n") && b.get(12..16) == Some(b"IHDR") {
        let w = u32::from_be_bytes(b.get(16..20)?.try_into().ok()?);
        let h = u32::from_be_bytes(b.get(20..24)?.try_into().ok()?);
        return (w > 0 && h > 0).then_some((ImageFormat::Png, w, h));
    }
    if !b.starts_with(b"\xff\xd8") {
        return None;
    }
    let mut i = 2;
    while i + 4 <= b.len() {
        if b[i] != 0xff {
            return None;
        }
        let marker = b[i + 1];
        if marker == 0xff {
            i += 1;
            continue;
        }
        let len = usize::from(u16::from_be_bytes([b[i + 2], b[i + 3]]));
        // SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC).
        if (0xc0..=0xcf).contains(&marker) && !matches!(marker, 0xc4 | 0xc8 | 0xcc) {
            let h = u32::from(u16::from_be_bytes([*b.get(i + 5)?, *b.get(i + 6)?]));
            let w = u32::from(u16::from_be_bytes([*b.get(i + 7)?, *b.get(i + 8)?]));
            return (w > 0 && h > 0).then_some((ImageFormat::Jpeg, w, h));
        }
        i += 2 + len;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_jpeg_and_png_sizes_and_refuses_the_rest() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend_from_slice(&[0, 0, 1, 0, 0, 0, 0, 200]);
        assert_eq!(sniff(&png), Some((ImageFormat::Png, 256, 200)));
        // SOI, an APP0 of 4 bytes, SOF0 with height 48 and width 64.
        let jpeg = [0xff, 0xd8, 0xff, 0xe0, 0, 4, 0, 0, 0xff, 0xc0, 0, 11, 8, 0, 48, 0, 64, 3];
        assert_eq!(sniff(&jpeg), Some((ImageFormat::Jpeg, 64, 48)));
        assert_eq!(sniff(b"GIF89a"), None);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x.gif"), b"GIF89a....").unwrap();
        assert!(check(dir.path(), "x.gif").unwrap_err().contains("is not a JPEG or PNG"));
        assert!(check(dir.path(), "none.jpg").unwrap_err().contains("cannot read it"));
    }
}
