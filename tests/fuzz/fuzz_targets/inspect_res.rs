//! `rverbs inspect`'s decoding of the kernel's nldev resource dumps: one
//! reply message's attributes through `for_each_res_entry` and
//! `Snapshot::add_entry` for every table (and the input as a bare entry),
//! then the JSON and text renderings.
#![no_main]

use rverbs_cli::inspect::res::{self, Snapshot};
use rverbs_netlink::{for_each_res_entry, Attrs, ResKind};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut snap = Snapshot::default();
    for kind in [
        ResKind::Qp,
        ResKind::CmId,
        ResKind::Cq,
        ResKind::Mr,
        ResKind::Pd,
        ResKind::Ctx,
        ResKind::Srq,
    ] {
        let _ = for_each_res_entry(data, kind, |e| snap.add_entry("rxe0", kind, e));
        let _ = snap.add_entry("rxe0", kind, Attrs::new(data));
    }
    for q in &snap.qps {
        let _ = q.json(None);
    }
    for c in &snap.cqs {
        let _ = c.json(Some(1));
    }
    for s in &snap.srqs {
        let _ = (s.json(), s.has_qp(7));
    }
    let _ = (
        snap.mrs.iter().map(res::MrRes::json).count(),
        snap.pds.iter().map(res::PdRes::json).count(),
        snap.cm_ids.iter().map(res::CmIdRes::json).count(),
        snap.ctxs.iter().map(res::CtxRes::json).count(),
    );
    let _ = res::text(&snap, &|_| None, &|_| None);
});
