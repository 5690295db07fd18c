//! Protection domains. Every MR, QP and AH holds its PD, so a PD is freed in
//! the kernel only after the last of them: deallocating a PD that is still in
//! use cannot be expressed.

use std::fmt;
use std::sync::Arc;

use rverbs_abi::cmd::exec;
use rverbs_abi::pd::DeallocPd;

use crate::context::Context;
use crate::error::Result;

pub(crate) struct PdInner {
    pub(crate) ctx: Context,
    pub(crate) handle: u32,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        let cmd = DeallocPd {
            pd_handle: self.handle,
        };
        // Nothing can use the PD any more (all holders are gone); a failure
        // here (device removed) leaves the kernel to free it with the context.
        let _ = exec(self.ctx.fd(), &cmd, &mut []);
    }
}

/// A protection domain. Cheap to clone.
#[derive(Clone)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

impl fmt::Debug for Pd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pd")
            .field("handle", &self.inner.handle)
            .finish()
    }
}

impl Context {
    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd> {
        let handle = self.provider().alloc_pd()?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                ctx: self.clone(),
                handle,
            }),
        })
    }
}

impl Pd {
    /// The context the PD belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The kernel's handle for the PD.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }
}
