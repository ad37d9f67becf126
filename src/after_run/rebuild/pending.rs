//! The files a merge writes besides the artifacts: the merged records file, written under a
//! temporary name and renamed once complete (a merge that stops leaves none half-written), and
//! one JSON value per line.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// The merged records file while it is written: a new file under a temporary name beside its
/// own, renamed to it once every level is in it, and removed if the merge stops before.
pub(super) struct Pending {
    /// Where it is written until it is complete.
    pub tmp: PathBuf,
    path: PathBuf,
    pub file: std::io::BufWriter<std::fs::File>,
    done: bool,
}

impl Pending {
    pub fn create(path: &Path) -> std::io::Result<Pending> {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let tmp = path.with_file_name(format!(".{name}.{}-{nanos:09}.tmp", std::process::id()));
        // A new file (the umask applies, as to every file the tool writes), never through a
        // link planted at its name.
        let file = crate::sys::no_follow(std::fs::OpenOptions::new().write(true).create_new(true)).open(&tmp)?;
        Ok(Pending { tmp, path: path.to_path_buf(), file: std::io::BufWriter::new(file), done: false })
    }

    pub fn persist(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        self.file.get_ref().sync_all()?;
        std::fs::rename(&self.tmp, &self.path)?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

pub(super) fn write_line(out: &mut impl Write, value: &impl Serialize) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    out.write_all(b"\n")
}

/// Write `values` to `path`, one JSON value per line, replacing what is there; never through a
/// link planted at its name.
pub(super) fn write_lines(path: &Path, values: &[impl Serialize]) -> std::io::Result<()> {
    let file = crate::sys::no_follow(std::fs::OpenOptions::new().write(true).create(true).truncate(true)).open(path)?;
    let mut out = std::io::BufWriter::new(file);
    for value in values {
        write_line(&mut out, value)?;
    }
    out.flush()
}
