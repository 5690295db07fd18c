// A scoped MR cannot leave its closure (it would outlive the borrow).
fn main() -> rverbs::Result<()> {
    let pd = rverbs::devices()?[0].open()?.alloc_pd()?;
    let mut buf = [0u8; 64];
    let mr = pd.register_scoped(&mut buf, rverbs::AccessFlags::LOCAL_WRITE, |mr| mr)?;
    let _ = mr;
    Ok(())
}
