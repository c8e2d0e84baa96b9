// FabricPath: writes between daemons as one-sided RDMA writes through
// libfabric (a WritePath, write_path.h). On InfiniBand and RoCE the `verbs`
// provider (rdma-core) moves the bytes card to card; on EFA- or
// Slingshot-class fabrics theirs; on machines without such a device the
// `tcp` provider runs the same code (and, with verbs_style, the same
// registration and receive rules as verbs).
//
// Memory, registered once when the path opens (never per op; registrations()
// counts them):
//   - for each peer, `slots` receive slots of `slot_bytes` that only that
//     peer may write into (its own key), and an 8-byte credit cell;
//   - `slots` send slots per peer, the source of this rank's writes.
// A Write() is cut into parts of at most slot_bytes - kSlotHeaderBytes.
// Each part is copied with its header (fabric_wire.h) into a free send slot
// and written with fi_writedata() into the same slot at the peer, the
// 32-bit immediate naming the writer and the slot. The receiver's thread
// hands the part to the transport's Inbox (it lands in the registered
// region, or is held as an early arrival) and writes a credit back, the
// immediate naming the slot, which frees it at the writer. A writer never
// has more parts in flight to a peer than the peer has slots: credit-based
// flow control. The write's Completion finishes once its last part is in a
// send slot.
//
// Progress: one thread per path reads the completion queue. It blocks in
// fi_cq_sread() when idle (callers wake it with fi_cq_signal()) and spins
// only for FabricOptions::spin first. It copies and posts the writes that
// wait for slots; a write of one part with a slot free is copied and posted
// on the caller's thread where the provider is FI_THREAD_SAFE.
//
// Registration modes: whatever the provider reports is followed (virtual
// addresses, provider keys, a descriptor on every operation, receives
// pre-posted for FI_RX_CQ_DATA); verbs_style makes the path follow all of
// them whatever the provider reports, so that CI exercises verbs' rules on
// the tcp provider (FabricMode says what is emulated).
//
// Thread-safe.
#ifndef STARLING_SERVER_TRANSPORT_FABRIC_FABRIC_PATH_H_
#define STARLING_SERVER_TRANSPORT_FABRIC_FABRIC_PATH_H_

#include <rdma/fabric.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/transport/fabric/fabric_wire.h"
#include "server/transport/fabric/peer_path.h"
#include "server/transport/handshake.h"
#include "server/transport/inbox.h"
#include "server/transport/write_path.h"

struct fid_fabric;
struct fid_domain;
struct fid_ep;
struct fid_av;
struct fid_cq;
struct fid_mr;
struct fi_cq_data_entry;

namespace starling {
namespace transport {
namespace fabric {

struct FabricOptions {
  // libfabric provider to ask for: "verbs" (InfiniBand/RoCE), "efa", "tcp",
  // ... Reliable-datagram endpoints; where the provider has none natively,
  // libfabric layers ofi_rxm on its connected endpoints ("verbs;ofi_rxm").
  std::string provider = "tcp";
  // Local address the endpoint binds to (the daemon's data address); empty:
  // the provider's first interface.
  std::string host;
  // Follow verbs' registration rules whatever the provider reports.
  bool verbs_style = false;
  // Receive (and send) slots per peer and their size: at most
  // slots * slot_bytes bytes are in flight to one peer.
  uint32_t slot_bytes = uint32_t{512} << 10;
  uint32_t slots = 8;
  // The progress thread polls this long before it blocks.
  absl::Duration spin = absl::ZeroDuration();
};

// What registration rules the path follows (from the provider's mr_mode and
// mode bits, or forced by verbs_style). Remote addresses are computed as
// virtual ones (FI_MR_VIRT_ADDR) and turned into offsets last where the
// provider wants those (ProviderAddress()).
struct FabricMode {
  bool local = false;       // FI_MR_LOCAL: a descriptor on every operation
  bool prov_key = false;    // FI_MR_PROV_KEY: keys are read back, not chosen
  bool rx_cq_data = false;  // FI_RX_CQ_DATA: each immediate takes a receive
  // What the provider itself requires (the rest is emulated).
  bool provider_virt_addr = false;
  bool provider_local = false;
  bool provider_prov_key = false;
  bool provider_rx_cq_data = false;
  std::string ToString() const;
};

// RLIMIT_MEMLOCK as an operator reads it: "64 KiB", "unlimited".
std::string MemlockLimitText();

class FabricPath : public PeerPath {
 public:
  // Opens the provider's fabric, domain and endpoint for a group of `size`
  // with this rank at `rank`, and registers every slot. Unavailable naming
  // what is missing: no provider ("fi_getinfo(verbs) found none for
  // 10.0.0.1: ..."), a refused registration (with RLIMIT_MEMLOCK).
  static absl::StatusOr<std::unique_ptr<FabricPath>> Open(
      const FabricOptions& options, int rank, int size, RankNamer name);

  ~FabricPath() override;

  // The HELLO to send `peer` (fabric_wire.h): this endpoint's address and
  // the slots and credit cell only `peer` may write into.
  FabricHello HelloFor(int peer) const override;

  // Takes `peer`'s HELLO: its address goes into the address vector.
  // FailedPrecondition if its slots or provider differ from this path's.
  absl::Status Connect(int peer, const FabricHello& hello) override;

  // "fabric (tcp;ofi_rxm)".
  std::string name() const override;
  // The provider libfabric chose ("verbs;ofi_rxm").
  const std::string& provider() const { return provider_; }
  const FabricMode& mode() const { return mode_; }

  // fi_mr_reg() calls since Open(): constant once open (none per op).
  uint64_t registrations() const override {
    return registrations_.load(std::memory_order_relaxed);
  }
  // Parts written and credits received, since Open().
  uint64_t parts_written() const {
    return parts_written_.load(std::memory_order_relaxed);
  }

  // WritePath.
  void Attach(Sink sink) override;
  void PostWrite(int peer, absl::Span<const std::byte> data, RegionId remote,
                 uint64_t remote_offset_bytes, uint32_t imm,
                 Completion* done) override;
  void FailPeer(int peer, const absl::Status& why) override;
  void Wake() override;
  void Drain(absl::Time deadline) override;
  void Stop() override;

 private:
  struct Op;
  struct Outgoing;
  struct Peer;

  FabricPath(const FabricOptions& options, int rank, int size, RankNamer name);
  absl::Status OpenFabric();
  // Finds how the provider's targets read remote addresses (offset or
  // virtual) with a write to this endpoint itself.
  absl::Status ProbeAddressing();
  absl::Status Register(void* buf, size_t len, uint64_t access, fid_mr** mr);
  // Posts `op` as a receive for an immediate (FI_RX_CQ_DATA), or counts
  // one where that is emulated.
  absl::Status PostReceive(Op* op);
  // An immediate arrived: it took a receive; post it again.
  absl::Status TakeReceive(const ::fi_cq_data_entry& entry);
  uint64_t ProviderAddress(uint64_t base, uint64_t offset) const;

  void Loop();
  // Each returns true if it did something.
  bool ReadCompletions(bool block);
  void HandleCompletion(const ::fi_cq_data_entry& entry);
  void HandleError();
  bool SendQueued();
  // Copies part `part` of `w` with its header into send slot `slot` of `p`
  // and writes it to the peer's slot at `remote`; fi_writedata()'s result.
  ssize_t PostPart(Peer* p, int slot, const Outgoing& w, uint32_t part,
                   fi_addr_t addr, uint64_t remote, uint64_t key);
  bool DeliverArrived();
  bool PostCredits();
  // Fails `peer` from the progress thread: the transport (and so this path)
  // learns it through the sink.
  void Report(int peer, const absl::Status& why);
  void Signal();

  const FabricOptions options_;
  const int rank_;
  const int size_;
  const RankNamer name_;
  std::string provider_;
  FabricMode mode_;
  size_t key_bytes_ = 8;
  // The provider takes calls from several threads at once (FI_THREAD_SAFE):
  // small writes are posted on the caller's thread.
  bool thread_safe_ = false;

  struct fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  std::string address_;  // fi_getname()

  // Memory: one allocation each, registered per peer where keys must differ.
  std::byte* recv_ = nullptr;         // size * slots * slot_bytes
  std::byte* send_ = nullptr;         // size * slots * slot_bytes
  uint64_t* credit_cells_ = nullptr;  // size cells
  uint64_t* credit_source_ = nullptr;
  fid_mr* send_mr_ = nullptr;
  fid_mr* credit_source_mr_ = nullptr;
  std::vector<std::unique_ptr<Peer>> peers_;  // by rank; fixed after Open()
  std::unique_ptr<Op[]> receive_ops_;
  int receive_op_count_ = 0;
  // FI_RX_CQ_DATA bookkeeping (progress thread): receives posted, not yet
  // taken by an immediate.
  int receives_posted_ = 0;

  std::atomic<uint64_t> registrations_{0};
  std::atomic<uint64_t> parts_written_{0};
  std::atomic<uint64_t> wake_generation_{0};

  absl::Mutex mu_;
  absl::CondVar changed_;  // a credit came back, a copy ended, a peer failed
  Sink sink_ ABSL_GUARDED_BY(mu_);
  bool attached_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fabric
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_FABRIC_FABRIC_PATH_H_
