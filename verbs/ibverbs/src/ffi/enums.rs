//! libibverbs' conversions of its own enums, which need no device:
//! `ibv_rate_to_mult`/`mult_to_ibv_rate` (a static rate as a multiple of
//! 2.5 Gb/s), `ibv_rate_to_mbps`/`mbps_to_ibv_rate` (as Mb/s) and
//! `ibv_wr_opcode_str` (a work request opcode's name). The values are
//! `enum ibv_rate`'s and `enum ibv_wr_opcode`'s of `<infiniband/verbs.h>`;
//! what each answers for a value it does not know is what the man pages
//! `ibv_rate_to_mult(3)` and `ibv_rate_to_mbps(3)` say (-1, or
//! `IBV_RATE_MAX`) and, for the opcode, "unknown".

use std::ffi::{c_char, c_int, CStr};

use super::guard;

/// `IBV_RATE_MAX`: "no rate" (0), what the reverse conversions answer for
/// a value they do not know.
const RATE_MAX: c_int = 0;

/// One `enum ibv_rate` value: its multiple of the 2.5 Gb/s base rate
/// (only for the rates that are one: the FDR and EDR lane rates are not),
/// and its rate in Mb/s (the data rate after the link's encoding, so
/// 14 Gb/s FDR is 14062 and 100 Gb/s EDR 103125).
struct Rate {
    value: c_int,
    mult: Option<c_int>,
    mbps: c_int,
}

const fn r(value: c_int, mult: Option<c_int>, mbps: c_int) -> Rate {
    Rate { value, mult, mbps }
}

/// Every rate `verbs.h` names but `IBV_RATE_MAX`, by enum value.
const RATES: &[Rate] = &[
    r(2, Some(1), 2_500),        // IBV_RATE_2_5_GBPS
    r(5, Some(2), 5_000),        // IBV_RATE_5_GBPS
    r(3, Some(4), 10_000),       // IBV_RATE_10_GBPS
    r(6, Some(8), 20_000),       // IBV_RATE_20_GBPS
    r(4, Some(12), 30_000),      // IBV_RATE_30_GBPS
    r(7, Some(16), 40_000),      // IBV_RATE_40_GBPS
    r(8, Some(24), 60_000),      // IBV_RATE_60_GBPS
    r(9, Some(32), 80_000),      // IBV_RATE_80_GBPS
    r(10, Some(48), 120_000),    // IBV_RATE_120_GBPS
    r(11, None, 14_062),         // IBV_RATE_14_GBPS
    r(12, None, 56_250),         // IBV_RATE_56_GBPS
    r(13, None, 112_500),        // IBV_RATE_112_GBPS
    r(14, None, 168_750),        // IBV_RATE_168_GBPS
    r(15, None, 25_781),         // IBV_RATE_25_GBPS
    r(16, None, 103_125),        // IBV_RATE_100_GBPS
    r(17, None, 206_250),        // IBV_RATE_200_GBPS
    r(18, None, 309_375),        // IBV_RATE_300_GBPS
    r(19, Some(11), 28_125),     // IBV_RATE_28_GBPS
    r(20, Some(20), 53_125),     // IBV_RATE_50_GBPS
    r(21, Some(160), 425_000),   // IBV_RATE_400_GBPS
    r(22, Some(240), 637_500),   // IBV_RATE_600_GBPS
    r(23, Some(320), 850_000),   // IBV_RATE_800_GBPS
    r(24, Some(480), 1_275_000), // IBV_RATE_1200_GBPS
];

fn by_value(rate: c_int) -> Option<&'static Rate> {
    RATES.iter().find(|r| r.value == rate)
}

/// `ibv_rate_to_mult`: the rate as a multiple of 2.5 Gb/s, or -1 for a
/// rate that is not one (or not a rate).
#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    guard(-1, || by_value(rate).and_then(|r| r.mult).unwrap_or(-1))
}

/// `mult_to_ibv_rate`: the rate that is `mult` times 2.5 Gb/s, or
/// `IBV_RATE_MAX` (0) for a multiple no rate is.
#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    guard(RATE_MAX, || {
        RATES
            .iter()
            .find(|r| r.mult == Some(mult))
            .map_or(RATE_MAX, |r| r.value)
    })
}

/// `ibv_rate_to_mbps`: the rate in Mb/s, or -1 for a value that is not a
/// rate.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    guard(-1, || by_value(rate).map_or(-1, |r| r.mbps))
}

/// `mbps_to_ibv_rate`: the rate of exactly `mbps` Mb/s (as
/// [`ibv_rate_to_mbps`] gives it), or `IBV_RATE_MAX` (0).
#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    guard(RATE_MAX, || {
        RATES
            .iter()
            .find(|r| r.mbps == mbps)
            .map_or(RATE_MAX, |r| r.value)
    })
}

/// The names of `enum ibv_wr_opcode`'s values, by value: `IBV_WR_RDMA_WRITE`
/// (0) to `IBV_WR_ATOMIC_WRITE` (15). 12 and 13 are no opcode but lie
/// inside the enum's range: libibverbs answers NULL for them (its table has
/// no name there), and so does this one.
const WR_OPCODES: [Option<&CStr>; 16] = [
    Some(c"rdma-write"),
    Some(c"rdma-write-with-imm"),
    Some(c"send"),
    Some(c"send-with-imm"),
    Some(c"rdma-read"),
    Some(c"atomic-cmp-and-swp"),
    Some(c"atomic-fetch-and-add"),
    Some(c"local-inv"),
    Some(c"bind-mw"),
    Some(c"send-with-inv"),
    Some(c"tso"),
    Some(c"driver1"),
    None,
    None,
    Some(c"flush"),
    Some(c"atomic-write"),
];

/// `ibv_wr_opcode_str` (rdma-core 56's `IBVERBS_PRIVATE_34`): the name of
/// a work request opcode, "unknown" for a value outside the enum's range,
/// NULL for the two values inside it that are no opcode (12, 13).
#[no_mangle]
pub extern "C" fn ibv_wr_opcode_str(opcode: c_int) -> *const c_char {
    guard(c"unknown".as_ptr(), || {
        match usize::try_from(opcode).ok().and_then(|i| WR_OPCODES.get(i)) {
            Some(Some(s)) => s.as_ptr(),
            Some(None) => std::ptr::null(),
            None => c"unknown".as_ptr(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_convert_both_ways() {
        assert_eq!(ibv_rate_to_mult(2), 1);
        assert_eq!(ibv_rate_to_mult(3), 4);
        assert_eq!(ibv_rate_to_mult(24), 480);
        assert_eq!(ibv_rate_to_mult(11), -1, "FDR's 14 Gb/s is no multiple");
        assert_eq!(ibv_rate_to_mult(0), -1);
        assert_eq!(ibv_rate_to_mult(25), -1);
        assert_eq!(mult_to_ibv_rate(4), 3);
        assert_eq!(mult_to_ibv_rate(3), 0);
        assert_eq!(ibv_rate_to_mbps(16), 103_125);
        assert_eq!(ibv_rate_to_mbps(-1), -1);
        assert_eq!(mbps_to_ibv_rate(14_062), 11);
        assert_eq!(mbps_to_ibv_rate(14_000), 0);
        for r in RATES {
            assert_eq!(mbps_to_ibv_rate(ibv_rate_to_mbps(r.value)), r.value);
            if let Some(m) = r.mult {
                assert_eq!(mult_to_ibv_rate(m), r.value);
            }
        }
    }

    #[test]
    fn opcode_names() {
        let s = |op| {
            // SAFETY: only called for opcodes with a name: a static
            // NUL-terminated string.
            unsafe { CStr::from_ptr(ibv_wr_opcode_str(op)) }
                .to_str()
                .unwrap()
        };
        assert_eq!(s(0), "rdma-write");
        assert_eq!(s(9), "send-with-inv");
        assert_eq!(s(15), "atomic-write");
        assert_eq!(s(16), "unknown");
        assert_eq!(s(-1), "unknown");
        assert_eq!(s(11), "driver1");
        assert_eq!(s(14), "flush");
        assert!(ibv_wr_opcode_str(12).is_null() && ibv_wr_opcode_str(13).is_null());
    }
}
