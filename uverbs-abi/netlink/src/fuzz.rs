//! Entry point of the netlink fuzz target (feature `fuzz`, not part of
//! the API): the reply parsing of [`super`] on arbitrary bytes, as if the
//! kernel had sent them.

use rverbs_abi::Errno;

use super::framing::feed;
use super::{for_each_res_entry, Attr, Attrs, Chardev, RdmaDev, ResKind};

/// Every accessor of `a`, and of the attributes nested in it down to
/// `depth` more levels.
fn walk(a: &Attr<'_>, depth: u32) {
    let _ = (a.u8(), a.u16(), a.u32(), a.u64(), a.uint(), a.str());
    if depth > 0 {
        for n in a.nested() {
            match n {
                Ok(n) => walk(&n, depth - 1),
                Err(_) => break,
            }
        }
    }
}

/// Feeds `data` to the reply parser: its first 4 bytes are the exchange's
/// sequence number, the rest one datagram. Each data message's attributes
/// are parsed as a device (`GET`), a char device (`GET_CHARDEV`) and every
/// resource dump table, every field read. Must never panic.
pub fn reply(data: &[u8]) {
    let Some((seq, datagram)) = data.split_first_chunk::<4>() else {
        return;
    };
    let seq = u32::from_ne_bytes(*seq);
    let mut cb_err = None;
    let mut f = |attrs: &[u8]| -> Result<(), Errno> {
        let _ = RdmaDev::parse(attrs);
        let _ = Chardev::parse(attrs);
        for kind in [
            ResKind::Qp,
            ResKind::CmId,
            ResKind::Cq,
            ResKind::Mr,
            ResKind::Pd,
            ResKind::Ctx,
            ResKind::Srq,
        ] {
            let _ = for_each_res_entry(attrs, kind, |entry: Attrs<'_>| {
                for a in entry {
                    walk(&a?, 3);
                }
                Ok(())
            });
        }
        for a in Attrs::new(attrs) {
            walk(&a?, 4);
        }
        Ok(())
    };
    let _ = feed(datagram, seq, &mut cb_err, &mut f);
}
