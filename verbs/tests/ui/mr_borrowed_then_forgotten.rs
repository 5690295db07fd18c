// Issue 10, finding 1: registering a borrowed buffer, forgetting the MR and
// freeing the buffer let the device write freed memory. An MR owns what it
// registers: a borrow is not a registrable buffer.
fn main() -> rverbs::Result<()> {
    let pd = rverbs::devices()?[0].open()?.alloc_pd()?;
    let mut buf = vec![0u8; 4096];
    let mr = pd.register(&mut buf, rverbs::AccessFlags::LOCAL_WRITE)?;
    std::mem::forget(mr);
    drop(buf);
    Ok(())
}
