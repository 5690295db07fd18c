//! Address handles: CREATE_AH (with the RoCE path mlx5 answers) and
//! DESTROY_AH.

use rverbs_abi::ah::{CreateAh, CreateAhResp, DestroyAh};
use rverbs_abi::mlx5;
use rverbs_abi::Errno;
use zerocopy::IntoBytes;

use super::lookup::{add_users, owned, owned_for_destroy};
use super::Call;
use crate::device;
use crate::emu::{self, Emu};

pub(super) fn create_ah(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: CreateAh = call.req()?;
    let a = req.attr;
    call.note(format_args!(
        "pd {} port {} dlid {:#x} global {}",
        req.pd_handle, a.port_num, a.dlid, a.is_global
    ));
    if !device::port_valid(a.port_num) {
        return Err(Errno::EINVAL);
    }
    owned(&emu.pds, call.ctx, req.pd_handle)?;
    // RoCE: the kernel resolves the destination MAC and mlx5 answers it.
    let dmac = if device::link() == device::Link::Eth {
        let dmac = roce_path(a.is_global, a.grh.sgid_index, &a.grh.dgid)?;
        // mlx5_ib_create_ah: room for the answer up to `dmac`.
        if call.drv_out.len < ROCE_AH_RESP_LEN {
            return Err(Errno::EINVAL);
        }
        Some(dmac)
    } else {
        if a.is_global != 0 && u32::from(a.grh.sgid_index) >= device::GID_TBL_LEN {
            return Err(Errno::EINVAL);
        }
        None
    };
    let handle = emu.handle();
    emu.ahs.insert(
        handle,
        emu::Ah {
            ctx: call.ctx,
            pd: req.pd_handle,
            attr: a,
        },
    );
    add_users(&mut emu.pds, req.pd_handle, 1);
    call.out.put(&CreateAhResp { ah_handle: handle }, true);
    if let Some(dmac) = dmac {
        // The kernel answers `response_length` and `dmac`, nothing past.
        let resp = mlx5::CreateAhResp {
            response_length: ROCE_AH_RESP_LEN as u32,
            dmac,
            ..Default::default()
        };
        call.drv_out
            .put_bytes(&resp.as_bytes()[..ROCE_AH_RESP_LEN], false);
        call.note(format_args!("dmac {dmac:02x?}"));
    } else {
        // InfiniBand link layer: no MAC to resolve.
        let resp = mlx5::CreateAhResp {
            response_length: call.drv_out.len.min(size_of::<mlx5::CreateAhResp>()) as u32,
            ..Default::default()
        };
        call.drv_out.put(&resp, false);
    }
    call.note(format_args!("-> ah {handle}"));
    Ok(())
}

/// Bytes of `struct mlx5_ib_create_ah_resp` the kernel answers on RoCE
/// (up to the end of `dmac`).
pub(super) const ROCE_AH_RESP_LEN: usize = std::mem::offset_of!(mlx5::CreateAhResp, reserved);

/// The checks and the MAC resolution the kernel applies to a RoCE address
/// vector (CREATE_AH, and MODIFY_QP of a connected QP; the alternate path
/// is checked but not resolved): `rdma_check_ah_attr` refuses one without
/// a GRH (`EINVAL`), `rdma_fill_sgid_attr` one whose source GID index
/// names no valid entry (`rdma_get_gid_attr`: `ENODATA`), and
/// `ib_resolve_eth_dmac` yields the destination MAC or its error (see
/// [`device::resolve_dmac`]).
pub(super) fn roce_path(is_global: u8, sgid_index: u8, dgid: &[u8; 16]) -> Result<[u8; 6], Errno> {
    if is_global == 0 {
        return Err(Errno::EINVAL);
    }
    let sgid = device::gid_entry(u32::from(sgid_index)).ok_or(Errno::ENODATA)?;
    device::resolve_dmac(&sgid, dgid)
}

pub(super) fn destroy_ah(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: DestroyAh = call.req()?;
    let h = req.ah_handle;
    call.note(format_args!("ah {h}"));
    let pd = owned_for_destroy(emu, &emu.ahs, call.ctx, h)?.pd;
    emu.ahs.remove(&h);
    add_users(&mut emu.pds, pd, -1);
    Ok(())
}
