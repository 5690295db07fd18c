// The buffer moves into the MR: it cannot be reallocated or freed while the
// device may write it.
fn main() -> rverbs::Result<()> {
    let pd = rverbs::devices()?[0].open()?.alloc_pd()?;
    let mut buf = vec![0u8; 4096];
    let mr = pd.register(buf, rverbs::AccessFlags::LOCAL_WRITE)?;
    buf.push(1);
    drop(mr);
    Ok(())
}
