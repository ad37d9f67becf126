//! One rule for every file the tool writes whole — artifacts, sweep summaries, search traces,
//! reports — so that no output option can be turned against the machine it runs on:
//!
//! - `-` is standard output.
//! - A name that does not exist yet, or a regular file, is written atomically: a temporary file
//!   with an unpredictable name beside it (created exclusively, never through a link, with the
//!   process umask like any other file the tool creates), flushed to disk, then renamed over
//!   the name. A rename only ever replaces a regular file or nothing.
//! - A FIFO or a character device (`/dev/null`, a terminal) is written in place.
//! - A symbolic link (`/dev/stdout`) is followed to what it names and that is written in place
//!   (a regular file truncated first), the link left as it was — but only a link owned by this
//!   user or by the owner of its directory: a link another user planted in a shared directory
//!   never redirects a write (the rule Linux applies in sticky directories, applied everywhere).
//! - Anything else — a directory, a block device, a socket, a link to nothing — is refused.

use std::fs::{Metadata, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Where an output went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// `-`: the process's standard output.
    Stdout,
    /// A regular file created or replaced atomically.
    Replaced(PathBuf),
    /// Written in place: a FIFO, a character device, or what a symbolic link names.
    InPlace(PathBuf),
}

impl Written {
    /// Whether the bytes went to this process's standard output (`-`, `/dev/stdout`, or a file
    /// that is the same one stdout is open on), so nothing else should be printed there.
    pub fn is_stdout(&self) -> bool {
        match self {
            Written::Stdout => true,
            Written::Replaced(_) => false,
            Written::InPlace(path) => same_file_as_stdout(path),
        }
    }
}

/// Whether an output option names standard output.
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Write a whole output to `path` by the rule above; `fill` writes the bytes (buffered).
pub fn write_whole(path: &Path, fill: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<Written> {
    if is_stdout(path) {
        let stdout = io::stdout();
        let mut lock = stdout.lock();
        let mut w = BufWriter::new(&mut lock);
        fill(&mut w)?;
        w.flush()?;
        return Ok(Written::Stdout);
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    match meta {
        None => replace(path, fill).map(Written::Replaced),
        Some(m) if m.file_type().is_file() => replace(path, fill).map(Written::Replaced),
        Some(m) if m.file_type().is_symlink() => {
            trusted_link(path, &m)?;
            let target = std::fs::metadata(path).map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => refused(format!(
                    "it is a symbolic link to {}, which does not exist; create it first or give that path",
                    std::fs::read_link(path).map_or_else(|_| "nothing".to_string(), |t| t.display().to_string())
                )),
                _ => e,
            })?;
            in_place(path, &target, true, fill)
        }
        Some(m) => in_place(path, &m, false, fill),
    }
}

/// A temporary file beside `path`, filled, flushed, synced and renamed over it.
fn replace(path: &Path, fill: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<PathBuf> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let prefix = format!(".{name}.");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp");
    // tempfile creates 0600; asked for 0666 the kernel applies the umask, as for every other
    // file the tool creates (0644 under the usual 022).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let mut tmp = builder.tempfile_in(dir)?;
    {
        let mut w = BufWriter::new(tmp.as_file_mut());
        fill(&mut w)?;
        w.flush()?;
    }
    tmp.as_file().sync_all()?;
    // On failure the temporary file is removed when `tmp` drops.
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(path.to_path_buf())
}

/// Write into an existing FIFO or character device (or a regular file a link names), never
/// creating anything; everything else is refused before it is opened.
fn in_place(
    path: &Path,
    meta: &Metadata,
    through_link: bool,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<Written> {
    let kind = Kind::of(meta);
    let mut options = OpenOptions::new();
    options.write(true);
    match kind {
        Kind::Regular if through_link => {
            options.truncate(true);
        }
        Kind::Fifo | Kind::CharDevice => {}
        other => {
            let what = if through_link { format!("it is a symbolic link to {}", other.name()) } else { other.name() };
            return Err(refused(format!("{what}; give the path of a regular file, or - for standard output")));
        }
    }
    if !through_link {
        // Opened by name again: a link swapped in since the check must not redirect it.
        crate::sys::no_follow(&mut options);
    }
    let file = options.open(path)?;
    let mut w = BufWriter::new(file);
    fill(&mut w)?;
    w.flush()?;
    Ok(Written::InPlace(path.to_path_buf()))
}

/// A link is followed only when this user or the owner of its directory made it.
fn trusted_link(path: &Path, link: &Metadata) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let dir_owner = std::fs::metadata(dir)?.uid();
        let owner = link.uid();
        if owner != crate::sys::effective_uid() && owner != dir_owner {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "it is a symbolic link made by another user (uid {owner}) in a directory they do not own, so it is not followed; remove it or give another path"
                ),
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = (path, link);
    Ok(())
}

fn refused(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// What a path is, for the rule and its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Regular,
    Directory,
    Fifo,
    CharDevice,
    BlockDevice,
    Socket,
    Other,
}

impl Kind {
    fn of(meta: &Metadata) -> Kind {
        let t = meta.file_type();
        if t.is_file() {
            return Kind::Regular;
        }
        if t.is_dir() {
            return Kind::Directory;
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt as _;
            if t.is_fifo() {
                return Kind::Fifo;
            }
            if t.is_char_device() {
                return Kind::CharDevice;
            }
            if t.is_block_device() {
                return Kind::BlockDevice;
            }
            if t.is_socket() {
                return Kind::Socket;
            }
        }
        Kind::Other
    }

    fn name(self) -> String {
        match self {
            Kind::Regular => "a regular file",
            Kind::Directory => "a directory",
            Kind::Fifo => "a FIFO",
            Kind::CharDevice => "a character device",
            // Writing a report onto a disk would destroy what is on it.
            Kind::BlockDevice => "a block device (a disk), which is never written",
            Kind::Socket => "a socket",
            Kind::Other => "neither a regular file, a FIFO nor a character device",
        }
        .to_string()
    }
}

/// Whether `path` is the file this process's stdout is open on (same device and inode).
fn same_file_as_stdout(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd as _;
        use std::os::unix::fs::MetadataExt as _;
        let Ok(fd) = io::stdout().as_fd().try_clone_to_owned() else { return false };
        let Ok(out) = std::fs::File::from(fd).metadata() else { return false };
        std::fs::metadata(path).is_ok_and(|m| m.dev() == out.dev() && m.ino() == out.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) -> io::Result<Written> {
        write_whole(path, |w| w.write_all(text.as_bytes()))
    }

    #[cfg(unix)]
    #[test]
    fn regular_files_are_replaced_and_links_keep_being_links() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        assert_eq!(write(&file, "one").unwrap(), Written::Replaced(file.clone()));
        assert_eq!(write(&file, "two").unwrap(), Written::Replaced(file.clone()));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "two");
        // Not the temporary file's 0600.
        assert_ne!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        let link = dir.path().join("link.txt");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(write(&link, "three").unwrap(), Written::InPlace(link.clone()));
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "three");
        let null = dir.path().join("null");
        std::os::unix::fs::symlink("/dev/null", &null).unwrap();
        assert_eq!(write(&null, "gone").unwrap(), Written::InPlace(null.clone()));
        assert!(std::fs::symlink_metadata(&null).unwrap().file_type().is_symlink());
        // Nothing left beside them.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
    }

    #[cfg(unix)]
    #[test]
    fn directories_and_links_to_nothing_or_to_a_directory_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = write(dir.path(), "x").unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        let e = write(&dangling, "x").unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        assert!(!dir.path().join("nowhere").exists());
        let to_dir = dir.path().join("to-dir");
        std::os::unix::fs::symlink(dir.path(), &to_dir).unwrap();
        let e = write(&to_dir, "x").unwrap_err();
        assert!(e.to_string().contains("symbolic link to a directory"), "{e}");
    }
}
