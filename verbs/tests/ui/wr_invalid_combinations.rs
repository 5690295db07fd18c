// Work requests are built per opcode: a combination the verbs do not define
// cannot be written (each line below is refused by the compiler).
use rverbs::{opcode, SendWr, Sge, WrOpcode};

fn main() {
    let sge = [Sge::default()];
    // Immediate data on an RDMA READ.
    let _ = opcode::Read::new(1, &sge, 0x1000, 7).imm(5);
    // An inline payload on an atomic.
    let _ = opcode::FetchAdd::inline(1, &[], 0x1000, 7, 1);
    // A request with an arbitrary opcode and payload.
    let _ = SendWr::new(1, WrOpcode::LocalInv, rverbs::Payload::Sge(&sge));
    // Fields set behind the builders' back.
    let mut wr = SendWr::send(1, &sge);
    wr.opcode = WrOpcode::RdmaRead;
}
