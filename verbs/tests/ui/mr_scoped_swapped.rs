// Two scopes' MRs cannot be swapped: the inner one would escape into the
// outer scope and outlive its borrow.
fn main() -> rverbs::Result<()> {
    let pd = rverbs::devices()?[0].open()?.alloc_pd()?;
    let mut a = [0u8; 64];
    let mut b = [0u8; 64];
    let access = rverbs::AccessFlags::LOCAL_WRITE;
    pd.register_scoped(&mut a, access, |outer| {
        pd.register_scoped(&mut b, access, |inner| std::mem::swap(outer, inner))
    })??;
    Ok(())
}
