// A scoped MR owns nothing to give back: it has no `into_inner`.
fn main() -> rverbs::Result<()> {
    let pd = rverbs::devices()?[0].open()?.alloc_pd()?;
    let mut buf = [0u8; 64];
    pd.register_scoped(&mut buf, rverbs::AccessFlags::LOCAL_WRITE, |mr| {
        let _ = mr.into_inner();
    })?;
    Ok(())
}
