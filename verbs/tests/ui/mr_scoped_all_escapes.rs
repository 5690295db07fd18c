// No MR of a multi-buffer scoped registration can leave its closure, nor
// can a buffer be used while it is registered.
fn main() -> rverbs::Result<()> {
    let pd = rverbs::devices()?[0].open()?.alloc_pd()?;
    let (mut a, mut b) = ([0u8; 64], [0u8; 64]);
    let mr = pd.register_scoped_all(
        [&mut a[..], &mut b[..]],
        rverbs::AccessFlags::LOCAL_WRITE,
        |[_, second]| Ok::<_, rverbs::Error>(second),
    )?;
    let _ = mr;
    Ok(())
}
