//! The few system calls the tool makes, in one place: the open-file limit, free disk space, the
//! effective user, two scheduling hints for bookkeeping and timer threads, and opening the input
//! files a user names (regular files only). `unsafe` is denied everywhere else.

#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::Path;

/// Lower the calling thread's scheduling priority: bookkeeping threads must never take the core
/// from the runtime threads that timestamp reads (on a pinned client, a burst of writes would
/// otherwise delay them by a whole scheduler slice).
pub fn lower_thread_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions; setpriority on our own thread id with a nice value
        // of 10 only lowers this thread's priority.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            let _ = libc::setpriority(libc::PRIO_PROCESS, tid, 10);
        }
    }
}

/// Linux lets a thread ask for a 1 ns timer slack instead of the default 50 µs.
pub fn lower_timer_slack() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_TIMERSLACK takes one integer argument and affects only this thread.
        let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    }
}

/// Bytes free for an unprivileged writer in `dir`'s file system, when the platform can tell.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
        let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: `path` is a valid NUL-terminated string and `stat` points to writable memory of
        // the right type; statvfs only writes into it.
        let rc = unsafe { libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        // SAFETY: statvfs returned 0, so it filled the structure.
        let stat = unsafe { stat.assume_init() };
        // The field types differ between platforms (u32 on some 32-bit ones).
        #[allow(clippy::unnecessary_cast)]
        Some((stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        None
    }
}

/// The open-file limit before and after `raise_file_limit`.
#[derive(Debug, Clone, Copy)]
pub struct FileLimit {
    pub soft_before: u64,
    pub soft: u64,
    pub hard: u64,
}

/// Raise the soft open-file limit towards `needed` (never above the hard limit). `None` when the
/// platform cannot tell.
pub fn raise_file_limit(needed: u64) -> Option<FileLimit> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes into the struct it is given.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return None;
        }
        // rlim_t is u32 on some 32-bit platforms.
        #[allow(clippy::unnecessary_cast)]
        let (soft, hard) = (limit.rlim_cur as u64, limit.rlim_max as u64);
        if soft >= needed {
            return Some(FileLimit { soft_before: soft, soft, hard });
        }
        let wanted = needed.min(hard);
        limit.rlim_cur = wanted as libc::rlim_t;
        // SAFETY: setrlimit reads the struct; raising the soft limit up to the hard one is allowed.
        let raised = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } == 0;
        Some(FileLimit { soft_before: soft, soft: if raised { wanted } else { soft }, hard })
    }
    #[cfg(not(unix))]
    {
        let _ = needed;
        None
    }
}

/// The user this process acts as (whose links an output may follow; see `artifact::output`).
#[cfg(unix)]
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Never follow a symbolic link at the last component when opening: a link planted at a path the
/// tool writes (a snapshot file, a temporary file) must not redirect the write elsewhere.
pub fn no_follow(options: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW)
    }
    #[cfg(not(unix))]
    {
        options
    }
}

/// CPU time (user + system) the whole process has used so far, when the platform can tell.
pub fn process_cpu_time() -> Option<std::time::Duration> {
    #[cfg(unix)]
    {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
        // SAFETY: `usage` points to writable memory of the right size; getrusage fills it on
        // success and reads nothing from it.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        // SAFETY: getrusage returned 0, so it initialised the struct.
        let usage = unsafe { usage.assume_init() };
        let time = |t: libc::timeval| {
            std::time::Duration::from_secs(t.tv_sec.max(0) as u64)
                + std::time::Duration::from_micros(t.tv_usec.max(0) as u64)
        };
        Some(time(usage.ru_utime) + time(usage.ru_stime))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Open an input file the user named (scenario, records, trace, dataset, artifact, tokenizer)
/// for reading, refusing anything that is not a regular file. A FIFO would block the open (or
/// the first read) forever and a device never ends, so both are refused with a message that
/// says what the path is. The open itself does not wait: it is non-blocking, and the file's type
/// is checked on the opened descriptor, so a path swapped between a check and the open changes
/// nothing.
pub fn open_input(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(not_regular(&kind));
    }
    #[cfg(unix)]
    {
        use std::os::unix::io::AsRawFd;
        // Reads of a regular file never block, but later readers expect an ordinary descriptor.
        // SAFETY: F_GETFL/F_SETFL on a descriptor we own only change its status flags.
        unsafe {
            let fd = file.as_raw_fd();
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                let _ = libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
            }
        }
    }
    Ok(file)
}

/// `std::fs::read` for an input file the user named: regular files only (see `open_input`).
pub fn read_input(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = open_input(path)?;
    let mut bytes = Vec::with_capacity(file.metadata().map_or(0, |m| m.len() as usize));
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// `std::fs::read_to_string` for an input file the user named: regular files only; text that is
/// not UTF-8 is an `InvalidData` error, as `std::fs::read_to_string` gives.
pub fn read_input_to_string(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read_input(path)?)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
}

/// Check that `path` names a regular file (following links), for a file a library opens itself
/// (a tokenizer). Nothing is opened, so a FIFO cannot block here.
pub fn require_regular_file(path: &Path) -> std::io::Result<()> {
    let kind = std::fs::metadata(path)?.file_type();
    if kind.is_file() { Ok(()) } else { Err(not_regular(&kind)) }
}

/// Whether an I/O error is `open_input`'s refusal of something that is not a regular file.
pub fn is_not_regular(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::InvalidInput && e.to_string().contains(NOT_REGULAR)
}

const NOT_REGULAR: &str = "not a regular file";

/// What a path that is not a regular file is, in words ("a FIFO (named pipe)", "a device", …).
pub fn kind_in_words(kind: &std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            if kind.is_fifo() {
                "a FIFO (named pipe)"
            } else if kind.is_socket() {
                "a socket"
            } else if kind.is_char_device() || kind.is_block_device() {
                "a device"
            } else {
                "something other than a file"
            }
        }
        #[cfg(not(unix))]
        {
            "something other than a file"
        }
    }
}

fn not_regular(kind: &std::fs::FileType) -> std::io::Error {
    let what = kind_in_words(kind);
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("it is {what}, {NOT_REGULAR}: give the path of a regular file"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FIFO, a directory and a device are refused at once, naming what they are; a regular
    /// file reads as `std::fs` reads it.
    #[cfg(unix)]
    #[test]
    fn inputs_must_be_regular_files() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("p");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let e = open_input(&fifo).unwrap_err();
        assert!(is_not_regular(&e) && e.to_string().contains("a FIFO (named pipe), not a regular file"), "{e}");
        assert!(is_not_regular(&require_regular_file(&fifo).unwrap_err()));
        let e = read_input(dir.path()).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        let e = read_input(Path::new("/dev/null")).unwrap_err();
        assert!(e.to_string().contains("a device"), "{e}");
        let file = dir.path().join("f.txt");
        std::fs::write(&file, "é\n").unwrap();
        assert_eq!(read_input_to_string(&file).unwrap(), "é\n");
        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        assert_eq!(read_input_to_string(&file).unwrap_err().kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(read_input(&dir.path().join("none")).unwrap_err().kind(), std::io::ErrorKind::NotFound);
    }
}
