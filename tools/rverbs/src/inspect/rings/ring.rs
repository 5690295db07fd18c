//! A ring found in the target's memory: its header, what kind of queue it
//! is, and reading its entries.

use rverbs_abi::rxe::{QueueBuf, QUEUE_DATA_OFFSET};
use zerocopy::FromBytes;

use super::{read_mem, Mapping, Refused};
use crate::inspect::guard::Budget;

/// The decoded ring header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// log2 of the element size.
    pub log2_elem_size: u32,
    /// Slots - 1 (indices are kept masked).
    pub index_mask: u32,
    /// Producer index.
    pub producer: u32,
    /// Consumer index.
    pub consumer: u32,
}

impl Header {
    /// Decode and check a header against the mapping length: the element
    /// size must be 2^4..2^16 bytes, the slot count a power of two that fits
    /// the mapping, and both indices inside the mask.
    pub fn parse(bytes: &[u8], map_len: u64) -> Result<Header, String> {
        let q = QueueBuf::read_from_prefix(bytes)
            .map_err(|_| "shorter than a ring header".to_string())?
            .0;
        let h = Header {
            log2_elem_size: q.log2_elem_size,
            index_mask: q.index_mask,
            producer: q.producer_index,
            consumer: q.consumer_index,
        };
        if !(4..=16).contains(&h.log2_elem_size) {
            return Err(format!(
                "element size 2^{} is implausible",
                h.log2_elem_size
            ));
        }
        let slots = u64::from(h.index_mask) + 1;
        if !slots.is_power_of_two() || slots < 2 {
            return Err(format!("index mask {:#x} is not 2^n - 1", h.index_mask));
        }
        // slots <= 2^32, elements <= 2^16 bytes: no overflow.
        let need = h.ring_bytes();
        if need > map_len {
            return Err(format!(
                "{slots} slots of {} bytes need {need} bytes, the mapping has {map_len}",
                h.elem_size()
            ));
        }
        if h.producer > h.index_mask || h.consumer > h.index_mask {
            return Err("an index is outside the mask".into());
        }
        Ok(h)
    }

    /// Bytes of the ring: header and every slot.
    pub fn ring_bytes(&self) -> u64 {
        let slots = u64::from(self.index_mask) + 1;
        QUEUE_DATA_OFFSET as u64 + (slots << self.log2_elem_size.min(16))
    }
    /// Element size in bytes.
    pub fn elem_size(&self) -> usize {
        1 << self.log2_elem_size
    }
    /// Slot count (0 for a mask of all ones, which only a mapping of
    /// 64 GiB or more could pass [`Header::parse`] with).
    pub fn slots(&self) -> u32 {
        self.index_mask.wrapping_add(1)
    }
    /// Capacity: at most slots - 1 elements are ever queued.
    pub fn capacity(&self) -> u32 {
        self.index_mask
    }
    /// Queued elements: producer - consumer.
    pub fn fill(&self) -> u32 {
        self.producer.wrapping_sub(self.consumer) & self.index_mask
    }
    /// The slots of the queued elements, oldest first.
    pub fn queued(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.fill()).map(|i| self.consumer.wrapping_add(i) & self.index_mask)
    }
}

/// What a ring is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A QP's send queue.
    Sq,
    /// A QP's receive queue.
    Rq,
    /// A shared receive queue.
    Srq,
    /// A receive queue or an SRQ (not told apart).
    RqOrSrq,
    /// A completion queue.
    Cq,
    /// Not an rxe ring, or not classified.
    Unknown,
}

impl Kind {
    /// The name used in the output.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Sq => "SQ",
            Kind::Rq => "RQ",
            Kind::Srq => "SRQ",
            Kind::RqOrSrq => "RQ/SRQ",
            Kind::Cq => "CQ",
            Kind::Unknown => "unknown",
        }
    }
    pub(super) fn is_recv(self) -> bool {
        matches!(self, Kind::Rq | Kind::Srq | Kind::RqOrSrq)
    }
}

/// One mapped ring of the process.
#[derive(Debug, Clone)]
pub struct Ring {
    /// The mapping.
    pub map: Mapping,
    /// The header, or why the mapping is not an rxe ring.
    pub header: Result<Header, String>,
    /// The ring (header and every slot), when it was read.
    pub data: Option<Vec<u8>>,
    /// The classification.
    pub kind: Kind,
    /// The evidence for the classification, in words.
    pub basis: Vec<String>,
    /// The owning QP (SQ, RQ).
    pub qpn: Option<u32>,
    /// The CQ number (CQ).
    pub cqn: Option<u32>,
    /// The SRQ number (SRQ).
    pub srqn: Option<u32>,
}

impl Ring {
    /// Read the header of `map` in process `pid` and, if it is a ring
    /// that fits `budget` (its header and slots: one queue's share, and
    /// what the run has left), the ring; otherwise the header only, with a
    /// note in [`Ring::basis`]. A mapping that cannot be read (unmapped
    /// meanwhile: `EFAULT`) is kept, with the reason as its header error;
    /// a refusal or a vanished process is an error.
    pub fn read(pid: u32, map: Mapping, budget: &mut Budget) -> Result<Ring, Refused> {
        let mut ring = Ring {
            map,
            header: Err(String::new()),
            data: None,
            kind: Kind::Unknown,
            basis: Vec::new(),
            qpn: None,
            cqn: None,
            srqn: None,
        };
        let (start, len) = (ring.map.start, ring.map.len());
        let head_len = QUEUE_DATA_OFFSET.min(usize::try_from(len).unwrap_or(usize::MAX));
        if let Err(e) = budget.charge(head_len as u64) {
            ring.header = Err(format!("not read: {e}"));
            return Ok(ring);
        }
        let mut basis = None;
        let got = read_mem(pid, start, head_len).and_then(|head| {
            match Header::parse(&head, len) {
                // Indices and elements from one read of the whole ring.
                Ok(h) => {
                    // parse checked that this fits the mapping.
                    let need = h.ring_bytes();
                    let mut queue = 0;
                    match budget.charge_queue(&mut queue, need) {
                        Ok(()) => {
                            let n = usize::try_from(need).unwrap_or(usize::MAX);
                            let d = read_mem(pid, start, n)?;
                            Ok((Header::parse(&d, len), Some(d)))
                        }
                        Err(e) => {
                            basis =
                                Some(format!("ring of {need} bytes not read (header only): {e}"));
                            Ok((Ok(h), None))
                        }
                    }
                }
                h => Ok((h, None)),
            }
        });
        ring.basis.extend(basis);
        match got {
            Ok((header, data)) => {
                ring.header = header;
                ring.data = data;
            }
            Err(Refused::Other(_, e)) if e.raw_os_error() == Some(libc::EFAULT) => {
                ring.header = Err(format!("could not be read: {e}"));
            }
            Err(e) => return Err(e),
        }
        Ok(ring)
    }

    /// The element in `slot`, if the ring was read.
    pub fn elem(&self, slot: u32) -> Option<&[u8]> {
        let h = self.header.as_ref().ok()?;
        let d = self.data.as_ref()?;
        let es = h.elem_size();
        let start = (slot as usize)
            .checked_mul(es)?
            .checked_add(QUEUE_DATA_OFFSET)?;
        d.get(start..start.checked_add(es)?)
    }

    pub(super) fn elems(&self) -> impl Iterator<Item = &[u8]> {
        let slots = self.header.as_ref().map_or(0, |h| h.slots());
        (0..slots).filter_map(move |s| self.elem(s))
    }
}
