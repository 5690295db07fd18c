//! State shared between the posting side of a work queue (a QP's SQ or RQ,
//! an SRQ) and the CQ that completes its WQEs: the `wr_id` of every posted
//! WQE, and how far completions have retired the queue. A CQE names its
//! queue by the QP's user index; the context's table maps it here.
