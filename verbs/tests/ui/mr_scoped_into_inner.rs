// A scoped MR owns nothing to give back: it has no `into_inner`.
fn main() -> verbs::Result<()> {
    let pd = verbs::devices()?[0].open()?.alloc_pd()?;
    let mut buf = [0u8; 64];
    pd.register_scoped(&mut buf, verbs::AccessFlags::LOCAL_WRITE, |mr| {
        let _ = mr.into_inner();
    })?;
    Ok(())
}
