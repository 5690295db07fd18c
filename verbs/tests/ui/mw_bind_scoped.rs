// A window bound to a scoped MR would keep the kernel from deregistering
// it when the scope ends: windows bind only to MRs that own their memory.
fn main() -> rverbs::Result<()> {
    let pd = rverbs::devices()?[0].open()?.alloc_pd()?;
    let mut buf = [0u8; 64];
    pd.register_scoped(&mut buf, rverbs::AccessFlags::LOCAL_WRITE, |mr| {
        let _ = mr.mw_bind(.., rverbs::AccessFlags::REMOTE_READ);
    })?;
    Ok(())
}
