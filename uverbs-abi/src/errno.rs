//! [`Errno`]: an error number from the kernel, this crate's own type (a
//! plain `i32`), so that no dependency's type is part of the public API.
//! Its names are Linux's (`<asm-generic/errno.h>`).

use std::fmt;

/// An error number the kernel returned (`errno`), such as
/// [`Errno::EINVAL`]. Displays as `EINVAL: Invalid argument`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Errno(i32);

macro_rules! errnos {
    ($($name:ident = $value:expr;)*) => {
        impl Errno {
            $(
                #[doc = concat!("`", stringify!($name), "`.")]
                pub const $name: Errno = Errno($value);
            )*
            /// `EWOULDBLOCK` (the same number as [`Errno::EAGAIN`]).
            pub const EWOULDBLOCK: Errno = Errno::EAGAIN;
            /// `EDEADLOCK` (the same number as [`Errno::EDEADLK`]).
            pub const EDEADLOCK: Errno = Errno::EDEADLK;

            /// The symbolic name (`"EINVAL"`), `None` for a number Linux
            /// does not define.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $(libc::$name => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

errnos! {
    EPERM = libc::EPERM;
    ENOENT = libc::ENOENT;
    ESRCH = libc::ESRCH;
    EINTR = libc::EINTR;
    EIO = libc::EIO;
    ENXIO = libc::ENXIO;
    E2BIG = libc::E2BIG;
    ENOEXEC = libc::ENOEXEC;
    EBADF = libc::EBADF;
    ECHILD = libc::ECHILD;
    EAGAIN = libc::EAGAIN;
    ENOMEM = libc::ENOMEM;
    EACCES = libc::EACCES;
    EFAULT = libc::EFAULT;
    ENOTBLK = libc::ENOTBLK;
    EBUSY = libc::EBUSY;
    EEXIST = libc::EEXIST;
    EXDEV = libc::EXDEV;
    ENODEV = libc::ENODEV;
    ENOTDIR = libc::ENOTDIR;
    EISDIR = libc::EISDIR;
    EINVAL = libc::EINVAL;
    ENFILE = libc::ENFILE;
    EMFILE = libc::EMFILE;
    ENOTTY = libc::ENOTTY;
    ETXTBSY = libc::ETXTBSY;
    EFBIG = libc::EFBIG;
    ENOSPC = libc::ENOSPC;
    ESPIPE = libc::ESPIPE;
    EROFS = libc::EROFS;
    EMLINK = libc::EMLINK;
    EPIPE = libc::EPIPE;
    EDOM = libc::EDOM;
    ERANGE = libc::ERANGE;
    EDEADLK = libc::EDEADLK;
    ENAMETOOLONG = libc::ENAMETOOLONG;
    ENOLCK = libc::ENOLCK;
    ENOSYS = libc::ENOSYS;
    ENOTEMPTY = libc::ENOTEMPTY;
    ELOOP = libc::ELOOP;
    ENOMSG = libc::ENOMSG;
    EIDRM = libc::EIDRM;
    ECHRNG = libc::ECHRNG;
    EL2NSYNC = libc::EL2NSYNC;
    EL3HLT = libc::EL3HLT;
    EL3RST = libc::EL3RST;
    ELNRNG = libc::ELNRNG;
    EUNATCH = libc::EUNATCH;
    ENOCSI = libc::ENOCSI;
    EL2HLT = libc::EL2HLT;
    EBADE = libc::EBADE;
    EBADR = libc::EBADR;
    EXFULL = libc::EXFULL;
    ENOANO = libc::ENOANO;
    EBADRQC = libc::EBADRQC;
    EBADSLT = libc::EBADSLT;
    EBFONT = libc::EBFONT;
    ENOSTR = libc::ENOSTR;
    ENODATA = libc::ENODATA;
    ETIME = libc::ETIME;
    ENOSR = libc::ENOSR;
    ENONET = libc::ENONET;
    ENOPKG = libc::ENOPKG;
    EREMOTE = libc::EREMOTE;
    ENOLINK = libc::ENOLINK;
    EADV = libc::EADV;
    ESRMNT = libc::ESRMNT;
    ECOMM = libc::ECOMM;
    EPROTO = libc::EPROTO;
    EMULTIHOP = libc::EMULTIHOP;
    EDOTDOT = libc::EDOTDOT;
    EBADMSG = libc::EBADMSG;
    EOVERFLOW = libc::EOVERFLOW;
    ENOTUNIQ = libc::ENOTUNIQ;
    EBADFD = libc::EBADFD;
    EREMCHG = libc::EREMCHG;
    ELIBACC = libc::ELIBACC;
    ELIBBAD = libc::ELIBBAD;
    ELIBSCN = libc::ELIBSCN;
    ELIBMAX = libc::ELIBMAX;
    ELIBEXEC = libc::ELIBEXEC;
    EILSEQ = libc::EILSEQ;
    ERESTART = libc::ERESTART;
    ESTRPIPE = libc::ESTRPIPE;
    EUSERS = libc::EUSERS;
    ENOTSOCK = libc::ENOTSOCK;
    EDESTADDRREQ = libc::EDESTADDRREQ;
    EMSGSIZE = libc::EMSGSIZE;
    EPROTOTYPE = libc::EPROTOTYPE;
    ENOPROTOOPT = libc::ENOPROTOOPT;
    EPROTONOSUPPORT = libc::EPROTONOSUPPORT;
    ESOCKTNOSUPPORT = libc::ESOCKTNOSUPPORT;
    EOPNOTSUPP = libc::EOPNOTSUPP;
    EPFNOSUPPORT = libc::EPFNOSUPPORT;
    EAFNOSUPPORT = libc::EAFNOSUPPORT;
    EADDRINUSE = libc::EADDRINUSE;
    EADDRNOTAVAIL = libc::EADDRNOTAVAIL;
    ENETDOWN = libc::ENETDOWN;
    ENETUNREACH = libc::ENETUNREACH;
    ENETRESET = libc::ENETRESET;
    ECONNABORTED = libc::ECONNABORTED;
    ECONNRESET = libc::ECONNRESET;
    ENOBUFS = libc::ENOBUFS;
    EISCONN = libc::EISCONN;
    ENOTCONN = libc::ENOTCONN;
    ESHUTDOWN = libc::ESHUTDOWN;
    ETOOMANYREFS = libc::ETOOMANYREFS;
    ETIMEDOUT = libc::ETIMEDOUT;
    ECONNREFUSED = libc::ECONNREFUSED;
    EHOSTDOWN = libc::EHOSTDOWN;
    EHOSTUNREACH = libc::EHOSTUNREACH;
    EALREADY = libc::EALREADY;
    EINPROGRESS = libc::EINPROGRESS;
    ESTALE = libc::ESTALE;
    EUCLEAN = libc::EUCLEAN;
    ENOTNAM = libc::ENOTNAM;
    ENAVAIL = libc::ENAVAIL;
    EISNAM = libc::EISNAM;
    EREMOTEIO = libc::EREMOTEIO;
    EDQUOT = libc::EDQUOT;
    ENOMEDIUM = libc::ENOMEDIUM;
    EMEDIUMTYPE = libc::EMEDIUMTYPE;
    ECANCELED = libc::ECANCELED;
    ENOKEY = libc::ENOKEY;
    EKEYEXPIRED = libc::EKEYEXPIRED;
    EKEYREVOKED = libc::EKEYREVOKED;
    EKEYREJECTED = libc::EKEYREJECTED;
    EOWNERDEAD = libc::EOWNERDEAD;
    ENOTRECOVERABLE = libc::ENOTRECOVERABLE;
    ERFKILL = libc::ERFKILL;
    EHWPOISON = libc::EHWPOISON;
}

impl Errno {
    /// The number `raw` as an `Errno` (0 and unknown numbers included:
    /// they display as `errno N`).
    pub const fn from_raw(raw: i32) -> Errno {
        Errno(raw)
    }

    /// The number.
    pub const fn raw(self) -> i32 {
        self.0
    }

    /// The calling thread's `errno`, as the last failed system call left it.
    pub fn last() -> Errno {
        Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }

    /// The C library's description (`"Invalid argument"`).
    pub fn desc(self) -> String {
        let s = std::io::Error::from_raw_os_error(self.0).to_string();
        // std appends " (os error N)"; the description is what precedes it.
        match s.rfind(" (os error ") {
            Some(at) => s[..at].to_string(),
            None => s,
        }
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "Errno({})", self.0),
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}: {}", self.desc()),
            None => write!(f, "errno {}", self.0),
        }
    }
}

impl std::error::Error for Errno {}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(e.0)
    }
}

impl From<nix::errno::Errno> for Errno {
    fn from(e: nix::errno::Errno) -> Errno {
        Errno(e as i32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_and_text() {
        assert_eq!(Errno::EINVAL.raw(), 22);
        assert_eq!(Errno::from_raw(110), Errno::ETIMEDOUT);
        assert_eq!(format!("{:?}", Errno::ENOENT), "ENOENT");
        assert_eq!(
            Errno::ETIMEDOUT.to_string(),
            "ETIMEDOUT: Connection timed out"
        );
        assert_eq!(Errno::from_raw(9999).to_string(), "errno 9999");
        assert_eq!(format!("{:?}", Errno::from_raw(9999)), "Errno(9999)");
        assert_eq!(Errno::EWOULDBLOCK, Errno::EAGAIN);
        assert_eq!(Errno::from(nix::errno::Errno::EPROTO), Errno::EPROTO);
        assert_eq!(std::io::Error::from(Errno::EIO).raw_os_error(), Some(5));
    }
}
