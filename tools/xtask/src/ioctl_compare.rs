//! The dmabuf ioctl comparison of `cargo xtask mlx5`: the
//! `UVERBS_METHOD_REG_DMABUF_MR` calls (`ioctl <result> 7 4 ...` records of
//! `MLX5_EMU_CMD_LOG`, format: tests/mlx5-emu/src/record.rs) that
//! rdma-core's `ibv_reg_dmabuf_mr` made in `tests/mlx5-emu/c/dmabuf.c`
//! against those our `Pd::reg_dmabuf_mr` made in
//! `tests/src/bin/mlx5_dmabuf.rs`, which registers the same ranges in the
//! same order.
//!
//! Every call of ours must be byte-identical (attributes in order, flags,
//! inputs, output lengths, result) to one of rdma-core's, in the same
//! order; rdma-core's calls ours lacks are those our library refuses
//! before the kernel (and the closed-descriptor one, which a `BorrowedFd`
//! cannot express). Both must have made at least one successful call.
//! Normalised: the file descriptor's value (attribute 5), a process-local
//! number.

/// `ioctl` records of object 7 (MR), method 4 (REG_DMABUF_MR).
const PREFIX_OBJ_METHOD: &str = " 7 4 ";

/// The outcome: how many of ours were compared and found among
/// rdma-core's, and the first problem if any.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// rdma-core's calls.
    pub theirs: usize,
    /// Our calls.
    pub ours: usize,
    /// Our calls identical to one of rdma-core's (in order).
    pub identical: usize,
    /// What went wrong (empty: nothing).
    pub problems: Vec<String>,
}

/// The REG_DMABUF_MR records of a command log, fd normalised.
pub fn calls(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.starts_with("ioctl "))
        .filter(|l| {
            // "ioctl <result> 7 4 ...": the object and method follow the result.
            l.split_once(' ')
                .and_then(|(_, rest)| rest.split_once(' '))
                .is_some_and(|(_, rest)| format!(" {rest}").starts_with(PREFIX_OBJ_METHOD))
        })
        .map(|l| {
            l.split(' ')
                .map(|w| {
                    if w.starts_with("5:") {
                        let flags = w.split(':').nth(1).unwrap_or("");
                        format!("5:{flags}:<fd>")
                    } else {
                        w.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Compares the two logs (see the module docs).
pub fn compare(theirs_log: &str, ours_log: &str) -> Outcome {
    let theirs = calls(theirs_log);
    let ours = calls(ours_log);
    let mut o = Outcome {
        theirs: theirs.len(),
        ours: ours.len(),
        ..Outcome::default()
    };
    let mut t = theirs.iter();
    for call in &ours {
        if t.by_ref().any(|x| x == call) {
            o.identical += 1;
        } else {
            o.problems
                .push(format!("ours not among rdma-core's (in order): {call}"));
            break;
        }
    }
    for (who, list) in [("rdma-core", &theirs), ("our provider", &ours)] {
        if !list.iter().any(|c| c.starts_with("ioctl ok ")) {
            o.problems
                .push(format!("{who} made no successful REG_DMABUF_MR call"));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = "ioctl ok 7 4 0:1:00 7:1:out4 1:1:01 5:1:07000000 6:1:07000000";
    const BADF: &str = "ioctl EBADF 7 4 0:1:00 7:1:out4 1:1:01 5:1:08000000 6:1:07000000";
    const INVAL: &str = "ioctl EINVAL 7 4 0:1:00 7:1:out4 1:1:01 5:1:09000000 6:1:41000000";

    #[test]
    fn ours_must_be_a_subsequence_of_theirs() {
        let theirs = format!("write ok 00\n{OK}\n{BADF}\n{INVAL}\nioctl ok 0 6 0:1:01\n");
        let ours = format!("{OK}\n{INVAL}\n");
        let o = compare(&theirs, &ours);
        assert_eq!((o.theirs, o.ours, o.identical), (3, 2, 2));
        assert!(o.problems.is_empty(), "{:?}", o.problems);
        // Another fd number is the same call.
        let ours = OK.replace("5:1:07000000", "5:1:0b000000");
        assert!(compare(&theirs, &ours).problems.is_empty());
        // A differing attribute is not.
        let ours = OK.replace("6:1:07000000", "6:1:03000000");
        assert_eq!(compare(&theirs, &ours).problems.len(), 1);
        // Out of order is not either.
        let ours = format!("{INVAL}\n{OK}\n");
        assert_eq!(compare(&theirs, &ours).identical, 1);
        // Nothing registered.
        assert!(!compare(&theirs, "").problems.is_empty());
    }
}
