//! The level's scrape file, `<level>.server-metrics.ndjson`: one JSON line per scrape, created
//! at the first line (never through a link planted at its name), flushed per line, and counted
//! in bytes so the writer can hold the file to its budget (see `raw`).

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;

/// Appends lines to the scrape file, created at the first line; stops at the first error.
pub(super) struct LineWriter {
    path: Option<PathBuf>,
    file: Option<std::io::BufWriter<std::fs::File>>,
    pub(super) error: Option<String>,
    /// Bytes written so far.
    pub(super) bytes: u64,
}

impl LineWriter {
    pub(super) fn new(path: Option<PathBuf>) -> LineWriter {
        LineWriter { path, file: None, error: None, bytes: 0 }
    }

    pub(super) fn write(&mut self, line: &impl Serialize) {
        let Some(path) = &self.path else { return };
        if self.error.is_some() {
            return;
        }
        if self.file.is_none() {
            // Never through a link planted at the name (the output directory may be shared).
            let mut options = std::fs::OpenOptions::new();
            options.create(true).write(true).truncate(true);
            match crate::sys::no_follow(&mut options).open(path) {
                Ok(f) => self.file = Some(std::io::BufWriter::new(f)),
                Err(e) => {
                    self.error = Some(format!("{}: {e}", path.display()));
                    return;
                }
            }
        }
        let Some(file) = self.file.as_mut() else { return };
        // Flushed per line: a soak killed hours in keeps every scrape up to then.
        let written = serde_json::to_vec(line)
            .map_err(std::io::Error::from)
            .and_then(|mut bytes| {
                bytes.push(b'\n');
                file.write_all(&bytes)?;
                Ok(bytes.len() as u64)
            })
            .and_then(|n| file.flush().map(|()| n));
        match written {
            Ok(n) => self.bytes += n,
            Err(e) => self.error = Some(format!("{}: {e}", path.display())),
        }
    }

    pub(super) fn flush(&mut self) {
        if let Some(file) = self.file.as_mut() {
            if let Err(e) = file.flush() {
                self.error.get_or_insert_with(|| e.to_string());
            }
        }
    }

    pub(super) fn written_name(&self) -> Option<String> {
        let path = self.path.as_ref()?;
        self.file.as_ref()?;
        path.file_name().map(|n| n.to_string_lossy().into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line() -> serde_json::Value {
        serde_json::json!({"level": "l", "phase": "start", "t_s": 0.0, "unix_ns": 0})
    }

    #[test]
    fn lines_are_written_and_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut out = LineWriter::new(Some(dir.path().join("l.server-metrics.ndjson")));
        out.write(&line());
        out.write(&line());
        out.flush();
        assert_eq!(out.error, None);
        assert_eq!(out.written_name().as_deref(), Some("l.server-metrics.ndjson"));
        let text = std::fs::read_to_string(dir.path().join("l.server-metrics.ndjson")).expect("written");
        assert_eq!(text.lines().count(), 2);
        assert!(text.starts_with(r#"{"level":"l","phase":"start","t_s":0.0,"#), "{text}");
    }

    #[cfg(unix)]
    #[test]
    fn a_link_planted_at_the_scrape_file_is_refused_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep me").expect("write");
        let path = dir.path().join("l.server-metrics.ndjson");
        std::os::unix::fs::symlink(&victim, &path).expect("symlink");
        let mut out = LineWriter::new(Some(path));
        out.write(&line());
        assert!(out.error.is_some());
        assert_eq!(out.written_name(), None);
        assert_eq!(std::fs::read_to_string(&victim).expect("read"), "keep me");
    }
}
