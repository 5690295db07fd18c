// The rdma_cm fd takes commands whose pointers the kernel writes through:
// a safe `write` to it could corrupt memory, so listeners, connections and
// event channels offer only the fd's number (AsRawFd), never AsFd.
fn needs_as_fd<T: std::os::fd::AsFd>(_: &T) {}

fn main() -> rverbs::Result<()> {
    let ch = rverbs_cm::EventChannel::new()?;
    needs_as_fd(&ch);
    let l = rverbs_cm::Listener::bind("10.0.0.1:7471".parse().unwrap(), 1)?;
    needs_as_fd(&l);
    Ok(())
}

fn connection(c: &rverbs_cm::Connection) {
    needs_as_fd(c);
}
