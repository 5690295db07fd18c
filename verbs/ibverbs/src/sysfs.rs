//! Reading sysfs attribute files as libibverbs' `ibv_read_sysfs_file`
//! and `ibv_query_pkey` do, on safe types: the file's bytes into a
//! caller's buffer with the trailing newline dropped and a NUL after it.

use std::io::Read;
use std::path::Path;

/// Why a sysfs read failed: the errno to report.
pub type Errno = i32;

/// Reads `path` into `buf` as `ibv_read_sysfs_file` does: one read of up
/// to `buf.len()` bytes; a trailing newline becomes the terminating NUL,
/// otherwise a NUL is written after the data. Returns the length without
/// the NUL, or the errno: the file's, or `EOVERFLOW` if the contents and
/// their NUL do not fit (the string would be unterminated).
pub fn read_into(path: &Path, buf: &mut [u8]) -> Result<usize, Errno> {
    let mut f = std::fs::File::open(path).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    let n = f
        .read(buf)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    terminate(buf, n)
}

/// Terminates the `n` bytes read into `buf` (see [`read_into`]).
fn terminate(buf: &mut [u8], n: usize) -> Result<usize, Errno> {
    if n == 0 {
        return Ok(0);
    }
    if buf[n - 1] == b'\n' {
        buf[n - 1] = 0;
        Ok(n - 1)
    } else if n < buf.len() {
        buf[n] = 0;
        Ok(n)
    } else {
        Err(libc::EOVERFLOW)
    }
}

/// The P_Key at `index` of `port` of the device whose sysfs directory is
/// `ibdev_dir` (`ports/<port>/pkeys/<index>`, hexadecimal), in host order.
pub fn pkey(ibdev_dir: &Path, port: u8, index: i32) -> Result<u16, Errno> {
    if index < 0 {
        return Err(libc::EINVAL);
    }
    let path = ibdev_dir.join(format!("ports/{port}/pkeys/{index}"));
    let mut buf = [0u8; 16];
    let n = read_into(&path, &mut buf)?;
    let text = std::str::from_utf8(&buf[..n]).map_err(|_| libc::EINVAL)?;
    let hex = text.trim();
    let hex = hex
        .strip_prefix("0x")
        .or_else(|| hex.strip_prefix("0X"))
        .unwrap_or(hex);
    u16::from_str_radix(hex, 16).map_err(|_| libc::EINVAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newline_becomes_the_nul_and_overflow_is_refused() {
        let mut b = *b"0xffff\n\0\0\0";
        assert_eq!(terminate(&mut b, 7), Ok(6));
        assert_eq!(&b[..7], b"0xffff\0");
        let mut b = *b"abc\0";
        assert_eq!(terminate(&mut b, 3), Ok(3));
        assert_eq!(b[3], 0);
        let mut b = *b"abcd";
        assert_eq!(terminate(&mut b, 4), Err(libc::EOVERFLOW));
        let mut b = [0u8; 0];
        assert_eq!(terminate(&mut b, 0), Ok(0));
    }

    #[test]
    fn pkeys_are_read_as_hex() {
        let dir = std::env::temp_dir().join(format!("ibverbs-pkey-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ports/1/pkeys")).unwrap();
        std::fs::write(dir.join("ports/1/pkeys/0"), "0xffff\n").unwrap();
        std::fs::write(dir.join("ports/1/pkeys/1"), "junk\n").unwrap();
        assert_eq!(pkey(&dir, 1, 0), Ok(0xffff));
        assert_eq!(pkey(&dir, 1, 1), Err(libc::EINVAL));
        assert_eq!(pkey(&dir, 1, 2), Err(libc::ENOENT));
        assert_eq!(pkey(&dir, 1, -1), Err(libc::EINVAL));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
