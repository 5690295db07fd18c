//! The mlx5 user context: the driver data of GET_CONTEXT (which the caller
//! issues, owning the async fd it opens), the UAR pages mapped from the
//! command fd (doorbell and BlueFlame registers), the doorbell-record
//! allocator and the QP table CQs resolve CQEs with.

use std::collections::HashSet;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex};

use rverbs_abi::mlx5::{self, AllocUcontextReqV2, AllocUcontextResp};
use rverbs_abi::Errno;

use crate::hw::dbrec::{DbPool, DbRec};
use crate::hw::map::{page_size, Mapping};
use crate::hw::uar::{BlueFlame, Doorbell};
use crate::wq::{QpEntry, Table};

/// Bfregs asked for in the static UAR pages.
const TOTAL_BFREGS: u32 = 16;
/// Of those, dedicated ("low latency") ones.
const LOW_LAT_BFREGS: u32 = 4;
/// Bfregs per 4 KiB UAR (2 of which the kernel hands to QPs).
const BFREGS_PER_UAR: u32 = 4;
/// Bfregs per UAR the kernel hands out (the others are fast-path only).
const NON_FP_BFREGS_PER_UAR: u32 = 2;
/// Bytes per UAR.
const UAR_SIZE: usize = 4096;
/// Offset of the first BlueFlame register in a UAR.
const BF_OFFSET: usize = 0x800;
/// Offset of the CQ arm doorbell in a UAR (`MLX5_CQ_DOORBELL`).
const CQ_DOORBELL: usize = 0x20;
/// User indexes are 24 bits; this one means "none" to the kernel.
const UIDX_INVALID: u32 = 0xFF_FFFF;

/// The driver data mlx5's GET_CONTEXT sends
/// (`mlx5_ib_alloc_ucontext_req_v2`): static bfregs, CQE version 1, 4K
/// UARs, no dynamic UARs (those need ioctl methods). The caller issues
/// GET_CONTEXT with it, owns the async fd of the core response, and builds
/// the provider context from the driver response with [`Uctx::from_resp`].
pub fn alloc_ucontext_req() -> AllocUcontextReqV2 {
    AllocUcontextReqV2 {
        total_num_bfregs: TOTAL_BFREGS,
        num_low_latency_bfregs: LOW_LAT_BFREGS,
        flags: 0,
        comp_mask: 0,
        max_cqe_version: 1,
        lib_caps: mlx5::MLX5_LIB_CAP_4K_UAR,
        ..Default::default()
    }
}

/// The user-index allocator's state.
#[derive(Debug)]
struct Uidx {
    next: u32,
    used: HashSet<u32>,
}

/// The provider context of an open mlx5 device. `Send + Sync`.
#[derive(Debug)]
pub struct Uctx {
    limits: Limits,
    tot_bfregs: u32,
    low_lat_bfregs: u32,
    uars_per_page: u32,
    /// The UAR pages (each register handle keeps its page mapped too).
    uars: Vec<Arc<Mapping>>,
    dbrecs: Arc<DbPool>,
    uidx: Mutex<Uidx>,
    table: Table,
    /// `MLX5_USER_CMDS_SUPP_UHW_*`: which commands carry mlx5 data.
    cmds_supp_uhw: u8,
}

/// The limits GET_CONTEXT reported, which creation checks against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Largest send WQE in bytes.
    pub max_sq_desc_sz: u32,
    /// Largest receive WQE in bytes.
    pub max_rq_desc_sz: u32,
    /// Largest send queue in 64-byte basic blocks.
    pub max_send_wqebb: u32,
    /// Largest receive queue in WQEs.
    pub max_recv_wr: u32,
    /// Largest SRQ in WQEs.
    pub max_srq_recv_wr: u32,
    /// CQE format (0 or 1).
    pub cqe_version: u8,
    /// Bytes per BlueFlame register (0: no BlueFlame).
    pub bf_reg_size: u32,
}

impl Uctx {
    /// The provider context of the GET_CONTEXT (sent with
    /// [`alloc_ucontext_req`]) on the command fd `fd` whose driver response
    /// is `r`: checks it and maps the static UAR pages. `EPROTO` if the
    /// response is unusable.
    pub fn from_resp(fd: BorrowedFd<'_>, r: &AllocUcontextResp) -> Result<Uctx, Errno> {
        if r.tot_bfregs == 0 || r.cache_line_size == 0 || r.cqe_version > 1 {
            return Err(Errno::EPROTO);
        }
        let uars_per_page = r.num_uars_per_page.max(1);
        let npages = r.tot_bfregs / (uars_per_page * NON_FP_BFREGS_PER_UAR);
        if npages == 0 || npages > 256 {
            return Err(Errno::EPROTO);
        }
        let page = page_size();
        let mut uars = Vec::with_capacity(npages as usize);
        for i in 0..npages as usize {
            let offset = (((mlx5::mmap_cmd::REGULAR_PAGE as usize) << 8) | i) * page;
            uars.push(Arc::new(Mapping::uar(fd, offset)?));
        }
        Ok(Uctx {
            limits: Limits {
                max_sq_desc_sz: r.max_sq_desc_sz.into(),
                max_rq_desc_sz: r.max_rq_desc_sz.into(),
                max_send_wqebb: r.max_send_wqebb,
                max_recv_wr: r.max_recv_wr,
                max_srq_recv_wr: r.max_srq_recv_wr,
                cqe_version: r.cqe_version,
                bf_reg_size: r.bf_reg_size,
            },
            tot_bfregs: r.tot_bfregs,
            low_lat_bfregs: LOW_LAT_BFREGS.min(r.tot_bfregs),
            uars_per_page,
            uars,
            dbrecs: DbPool::new(),
            uidx: Mutex::new(Uidx {
                next: 0,
                used: HashSet::new(),
            }),
            table: Table::default(),
            cmds_supp_uhw: r.cmds_supp_uhw,
        })
    }

    /// Whether CREATE_AH answers the destination MAC the kernel resolved
    /// (`MLX5_USER_CMDS_SUPP_UHW_CREATE_AH`): what address handles on a
    /// RoCE port need here (libmlx5 otherwise asks the neighbour table
    /// over netlink, which this provider does not do).
    pub fn create_ah_answers_dmac(&self) -> bool {
        self.cmds_supp_uhw & mlx5::MLX5_USER_CMDS_SUPP_UHW_CREATE_AH != 0
    }

    /// A context without a device (no UAR pages), for unit tests.
    #[cfg(test)]
    pub(crate) fn for_tests(limits: Limits) -> Arc<Uctx> {
        Arc::new(Uctx {
            limits,
            tot_bfregs: TOTAL_BFREGS,
            low_lat_bfregs: LOW_LAT_BFREGS,
            uars_per_page: 1,
            uars: Vec::new(),
            dbrecs: DbPool::new(),
            uidx: Mutex::new(Uidx {
                next: 0,
                used: HashSet::new(),
            }),
            table: Table::default(),
            cmds_supp_uhw: 0,
        })
    }

    /// The limits the kernel reported.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// CQE format in use (0 or 1).
    pub(crate) fn cqe_version(&self) -> u8 {
        self.limits.cqe_version
    }

    /// A zeroed 64-byte doorbell record.
    #[cfg(test)]
    pub(crate) fn alloc_dbrec(self: &Arc<Self>) -> Result<DbRec, Errno> {
        self.dbrecs.alloc()
    }

    /// A doorbell record from `alloc` where one is given and does not
    /// answer "use the default", else from the context's pool.
    pub(crate) fn alloc_dbrec_in(
        self: &Arc<Self>,
        alloc: Option<&rverbs_provider::SharedAllocator>,
    ) -> Result<DbRec, Errno> {
        self.dbrecs.alloc_in(alloc)
    }

    /// The register behind CREATE_QP's `bfreg_index` (the kernel's
    /// "gross" index: UAR `idx / 4`, register `idx % 4`, of which only 0
    /// and 1 are handed out): UAR page base + 0x800 + k * bf_reg_size,
    /// with BlueFlame halves of bf_reg_size / 2 bytes (none for index 0),
    /// dedicated if it is a low-latency register (used by this QP only:
    /// BlueFlame with the half toggle needs no lock).
    pub(crate) fn bfreg(&self, bfreg_index: u32) -> Result<BlueFlame, Errno> {
        let uar = bfreg_index / BFREGS_PER_UAR;
        let k = bfreg_index % BFREGS_PER_UAR;
        if k >= NON_FP_BFREGS_PER_UAR {
            return Err(Errno::EPROTO);
        }
        let page = (uar / self.uars_per_page) as usize;
        let in_page = (uar % self.uars_per_page) as usize;
        let base = self.uars.get(page).ok_or(Errno::EPROTO)?;
        let off = in_page * UAR_SIZE + BF_OFFSET + k as usize * self.limits.bf_reg_size as usize;
        if off + (self.limits.bf_reg_size as usize).max(8) > base.len() {
            return Err(Errno::EPROTO);
        }
        let net = uar * NON_FP_BFREGS_PER_UAR + k;
        let buf_size = if bfreg_index == 0 {
            0
        } else {
            self.limits.bf_reg_size / 2
        };
        let dedicated = bfreg_index != 0 && net >= self.tot_bfregs - self.low_lat_bfregs;
        BlueFlame::new(base, off, buf_size, dedicated).ok_or(Errno::EPROTO)
    }

    /// The CQ arm doorbell: offset 0x20 of the first UAR page. `None` for
    /// a context without UAR pages (unit tests only).
    pub(crate) fn cq_doorbell(&self) -> Option<Doorbell> {
        Doorbell::new(self.uars.first()?, CQ_DOORBELL)
    }

    /// A fresh user index (CQE version 1): a counter modulo 2^24 from 0
    /// (libmlx5's first index too) that skips 0xFFFFFF and indexes in use,
    /// so a destroyed QP's index is not reused soon.
    pub(crate) fn alloc_uidx(&self) -> Result<u32, Errno> {
        let mut u = self.uidx.lock().unwrap_or_else(|p| p.into_inner());
        if u.used.len() >= UIDX_INVALID as usize {
            return Err(Errno::ENOMEM);
        }
        loop {
            let cand = u.next;
            u.next = (u.next + 1) & UIDX_INVALID;
            if cand != UIDX_INVALID && !u.used.contains(&cand) {
                u.used.insert(cand);
                return Ok(cand);
            }
        }
    }

    /// Makes `uidx`'s CQEs resolve to `e`.
    pub(crate) fn register_qp(&self, uidx: u32, e: Arc<QpEntry>) {
        self.table.insert(uidx, e);
    }

    /// Forgets `uidx` (its later CQEs are dropped) and frees the index.
    pub(crate) fn unregister_qp(&self, uidx: u32) {
        self.table.remove(uidx);
        let mut u = self.uidx.lock().unwrap_or_else(|p| p.into_inner());
        u.used.remove(&uidx);
    }

    /// The user-index table.
    pub(crate) fn table(&self) -> &Table {
        &self.table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uidx_is_monotonic_and_skips_used() {
        let u = Uctx::for_tests(Limits::default());
        let a = u.alloc_uidx().unwrap();
        let b = u.alloc_uidx().unwrap();
        // From 0, as libmlx5's first indexes (the command comparison).
        assert_eq!((a, b), (0, 1));
        u.unregister_qp(a);
        // Not reused right away.
        assert_eq!(u.alloc_uidx().unwrap(), 2);
        // Wrap: skips 0xFFFFFF and indexes in use.
        u.uidx.lock().unwrap().next = UIDX_INVALID - 1;
        u.uidx.lock().unwrap().used.insert(0);
        assert_eq!(u.alloc_uidx().unwrap(), UIDX_INVALID - 1);
        assert_eq!(u.alloc_uidx().unwrap(), 3);
        assert_eq!(u.alloc_uidx().unwrap(), 4);
    }

    #[test]
    fn dbrecs_come_from_the_context_pool() {
        let u = Uctx::for_tests(Limits::default());
        let a = u.alloc_dbrec().unwrap();
        let b = u.alloc_dbrec().unwrap();
        assert_eq!(b.addr() - a.addr(), 64);
        assert_eq!(u.dbrecs.in_use(), 2);
        drop(a);
        assert_eq!(u.dbrecs.in_use(), 1);
    }

    /// A context whose 8 "UAR pages" are anonymous memory.
    fn with_pages(bf_reg_size: u32) -> Arc<Uctx> {
        let mut u = Arc::into_inner(Uctx::for_tests(Limits {
            bf_reg_size,
            ..Default::default()
        }))
        .unwrap();
        for _ in 0..8 {
            u.uars.push(Arc::new(Mapping::anon(4096).unwrap()));
        }
        Arc::new(u)
    }

    #[test]
    fn bfreg_addresses_and_classes() {
        let u = with_pages(512);
        let page = |i: usize| u.uars[i].addr() as usize;
        let b = u.bfreg(0).unwrap();
        assert_eq!(
            (b.addr(), b.buf_size(), b.dedicated()),
            (page(0) + 0x800, 0, false)
        );
        let b = u.bfreg(1).unwrap();
        assert_eq!(
            (b.addr(), b.buf_size(), b.dedicated()),
            (page(0) + 0xA00, 256, false)
        );
        let b = u.bfreg(4).unwrap();
        assert_eq!(
            (b.addr(), b.buf_size(), b.dedicated()),
            (page(1) + 0x800, 256, false)
        );
        // Net index 11 (UAR 5, k 1): shared; 12 and up: low latency.
        assert!(!u.bfreg(21).unwrap().dedicated());
        let b = u.bfreg(24).unwrap();
        assert_eq!((b.addr(), b.dedicated()), (page(6) + 0x800, true));
        let b = u.bfreg(29).unwrap();
        assert_eq!((b.addr(), b.dedicated()), (page(7) + 0xA00, true));
        // Fast-path registers are never handed out; no UAR 8.
        assert_eq!(u.bfreg(2).unwrap_err(), Errno::EPROTO);
        assert_eq!(u.bfreg(3).unwrap_err(), Errno::EPROTO);
        assert_eq!(u.bfreg(32).unwrap_err(), Errno::EPROTO);
        assert_eq!(u.cq_doorbell().unwrap().addr(), page(0) + 0x20);
        // Without BlueFlame: 8-byte doorbells only.
        let u = with_pages(0);
        let b = u.bfreg(1).unwrap();
        assert_eq!(
            (b.addr(), b.buf_size()),
            (u.uars[0].addr() as usize + 0x800, 0)
        );
    }

    #[test]
    fn bad_context_answers_are_refused() {
        // Any fd: every case is refused before anything is mapped from it.
        let stdin = std::io::stdin();
        let fd = std::os::fd::AsFd::as_fd(&stdin);
        let good = AllocUcontextResp {
            tot_bfregs: 16,
            cache_line_size: 64,
            cqe_version: 1,
            num_uars_per_page: 1,
            ..Default::default()
        };
        let bad = [
            AllocUcontextResp {
                tot_bfregs: 0,
                ..good
            },
            AllocUcontextResp {
                cache_line_size: 0,
                ..good
            },
            AllocUcontextResp {
                cqe_version: 2,
                ..good
            },
            // Fewer bfregs than one UAR's worth: no page to map.
            AllocUcontextResp {
                tot_bfregs: 1,
                ..good
            },
        ];
        for r in bad {
            assert_eq!(Uctx::from_resp(fd, &r).unwrap_err(), Errno::EPROTO, "{r:?}");
        }
    }

    #[test]
    fn bfreg_without_pages_is_an_error() {
        let u = Uctx::for_tests(Limits::default());
        assert_eq!(u.bfreg(0).unwrap_err(), Errno::EPROTO);
        assert_eq!(u.bfreg(2).unwrap_err(), Errno::EPROTO);
        assert!(u.cq_doorbell().is_none());
    }
}
