#include "server/transport/fabric/fabric_path.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/logging.h"
#include "server/base/secure_random.h"
#include "server/base/status_macros.h"

namespace starling {
namespace transport {
namespace fabric {
namespace {

constexpr uint32_t kCreditBit = 0x80000000u;
constexpr int kMaxRanks = 0x8000;  // the immediate's 15 rank bits
constexpr int kCompletionBatch = 32;
// fi_cq_sread()'s bound: callers wake it with fi_cq_signal(); this only
// bounds a wake-up that a provider might lose.
constexpr int kBlockMillis = 200;
// How long a path's first write to itself may take to land when it opens
// (ProbeAddressing): generous, since a host opening many paths at once is
// busy; a provider whose writes never land fails only after it.
constexpr absl::Duration kProbeWait = absl::Seconds(5);

uint32_t DataImm(int rank, int slot) {
  return (static_cast<uint32_t>(rank) << 16) | static_cast<uint32_t>(slot);
}

std::string FiError(const char* call, int ret) {
  return absl::StrCat(call, ": ", fi_strerror(ret < 0 ? -ret : ret), " (", ret,
                      ")");
}

std::byte* AllocateZeroed(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, std::max<size_t>(bytes, 64)) != 0) {
    return nullptr;
  }
  std::memset(p, 0, std::max<size_t>(bytes, 64));
  return static_cast<std::byte*>(p);
}

size_t MappedLength(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(bytes, 64) + page - 1) / page * page;
}

// Zeroed memory that peers write into, at a random page-aligned address
// that nothing of this process had before. Keys alone do not tell one
// group's region from an earlier one's: ofi_rxm over tcp (libfabric 1.17)
// ignores the caller's key and numbers regions 2, 4, ... in every domain,
// so a stale (key, address) pair named the new group's slots whenever the
// allocator handed out the freed address again. At a random address the
// provider's range check drops such a write. Falls back to an address of
// the kernel's choosing (kernels before 4.17 take MAP_FIXED_NOREPLACE as a
// hint only and may answer elsewhere). Free with UnmapRemoteWritable().
std::byte* MapRemoteWritable(size_t bytes) {
  const size_t length = MappedLength(bytes);
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  // Between 1 TiB and 64 TiB: inside every x86-64 and arm64 user space
  // (47 and 48 bits), clear of the heap, the stacks and the libraries.
  constexpr uintptr_t kLow = uintptr_t{1} << 40;
  constexpr uintptr_t kHigh = uintptr_t{1} << 46;
  for (int attempt = 0; attempt < 8; ++attempt) {
    absl::StatusOr<uint64_t> random =
        SecureRandom64("the address of a fabric region");
    if (!random.ok()) break;
    const uintptr_t hint = (kLow + *random % (kHigh - kLow)) / page * page;
    void* p =
        mmap(reinterpret_cast<void*>(hint), length, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED) continue;
    if (p == reinterpret_cast<void*>(hint)) return static_cast<std::byte*>(p);
    munmap(p, length);
  }
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
}

void UnmapRemoteWritable(void* p, size_t bytes) {
  if (p != nullptr) munmap(p, MappedLength(bytes));
}

// The sizes mapped (and unmapped) per path: a peer's receive slots, and the
// credit cells, one per rank.
size_t SlotAreaBytes(const FabricOptions& options) {
  return size_t{options.slots} * options.slot_bytes;
}
size_t CreditCellsBytes(int size) {
  return sizeof(uint64_t) * static_cast<size_t>(size);
}

}  // namespace

std::string MemlockLimitText() {
  struct rlimit limit = {};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return "unknown";
  if (limit.rlim_cur == RLIM_INFINITY) return "unlimited";
  return absl::StrCat(limit.rlim_cur / 1024, " KiB");
}

struct FabricPath::Op {
  // First: the room FI_CONTEXT / FI_CONTEXT2 providers may use.
  struct fi_context2 context = {};
  enum class Kind { kData, kCredit, kReceive } kind = Kind::kData;
  int peer = -1;
  int slot = -1;
};

struct FabricPath::Outgoing {
  absl::Span<const std::byte> data;
  RegionId region = 0;
  uint64_t offset = 0;
  uint32_t imm = 0;
  uint32_t seq = 0;
  uint32_t parts = 1;
  uint32_t next_part = 0;
  Completion* done = nullptr;
};

struct FabricPath::Peer {
  // Local memory and its registrations (fixed after Open()).
  std::byte* recv = nullptr;  // slots * slot_bytes, written by this peer
  std::byte* send = nullptr;  // slots * slot_bytes, written to this peer
  fid_mr* recv_mr = nullptr;
  fid_mr* send_mr = nullptr;
  fid_mr* credit_mr = nullptr;
  std::unique_ptr<Op[]> data_ops;
  std::unique_ptr<Op[]> credit_ops;

  // Guarded by FabricPath::mu_.
  bool connected = false;
  fi_addr_t addr = FI_ADDR_UNSPEC;
  uint64_t recv_base = 0;
  uint64_t recv_key = 0;
  uint64_t credit_base = 0;
  uint64_t credit_key = 0;
  absl::Status failed;
  uint32_t next_seq = 0;
  std::deque<Outgoing> queue;
  std::vector<int> free_slots;
  int copying = 0;  // writes whose data is being copied into a send slot

  // The progress thread's alone.
  std::deque<int> arrived;      // slots written, not yet handed on
  std::deque<int> credits_due;  // slots handed on, credit not yet posted
  bool paused = false;          // the inbox had no room for arrived.front()
  uint64_t paused_at = 0;       // wake generation when it paused
};

std::string FabricMode::ToString() const {
  std::vector<std::string> rules;
  auto add = [&](bool on, bool by_provider, const char* what) {
    if (!on) return;
    rules.push_back(by_provider ? what : absl::StrCat(what, " (emulated)"));
  };
  add(true, provider_virt_addr, "virtual addresses");
  add(local, provider_local, "descriptors");
  add(prov_key, provider_prov_key, "provider keys");
  add(rx_cq_data, provider_rx_cq_data, "pre-posted receives");
  return absl::StrJoin(rules, ", ");
}

FabricPath::FabricPath(const FabricOptions& options, int rank, int size,
                       RankNamer name)
    : options_(options), rank_(rank), size_(size), name_(std::move(name)) {}

absl::StatusOr<std::unique_ptr<FabricPath>> FabricPath::Open(
    const FabricOptions& options, int rank, int size, RankNamer name) {
  if (size < 1 || size > kMaxRanks || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("fabric path for rank ", rank, " of ", size, ": at most ",
                     kMaxRanks, " ranks"));
  }
  if (options.slots == 0 || options.slots > 0xffff ||
      options.slot_bytes <= kSlotHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("fabric slots: ", options.slots, " of ",
                     options.slot_bytes, " bytes (1 to 65535 slots of more ",
                     "than ", kSlotHeaderBytes, " bytes)"));
  }
  std::unique_ptr<FabricPath> path(
      new FabricPath(options, rank, size, std::move(name)));
  STARLING_RETURN_IF_ERROR(path->OpenFabric());
  return path;
}

absl::Status FabricPath::OpenFabric() {
  // Offsets are asked for first: a provider that needs virtual addresses
  // (verbs, efa) refuses, and is asked again with FI_MR_VIRT_ADDR, which
  // its mr_mode then reports. Where the hints allow both, ofi_rxm over tcp
  // was seen to treat targets one way or the other from one process to the
  // next; asking for exactly one leaves no doubt.
  // The shm provider's node is its endpoint's name in /dev/shm: a host
  // would give every process on it the same one, and its own default (from
  // the pid) repeats across pid namespaces (containers, sandboxes).
  std::string shm_name;
  if (options_.provider == "shm") {
    STARLING_ASSIGN_OR_RETURN(
        const uint64_t nonce,
        SecureRandom64("the shm provider's endpoint name"));
    shm_name = absl::StrCat("starling_", getpid(), "_", nonce);
  }
  const char* node = options_.provider == "shm" ? shm_name.c_str()
                     : options_.host.empty()    ? nullptr
                                                : options_.host.c_str();
  int ret = -FI_ENODATA;
  for (const uint64_t address_mode : {uint64_t{0}, uint64_t{FI_MR_VIRT_ADDR}}) {
    struct fi_info* hints = fi_allocinfo();
    if (hints == nullptr) return absl::ResourceExhaustedError("fi_allocinfo");
    hints->caps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_MSG | FI_RECV;
    hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_PROV_KEY | address_mode;
    hints->domain_attr->cq_data_size = 4;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->fabric_attr->prov_name = strdup(options_.provider.c_str());
    ret = fi_getinfo(FI_VERSION(1, 17), node, nullptr,
                     node != nullptr ? FI_SOURCE : 0, hints, &info_);
    fi_freeinfo(hints);
    if (ret == 0 && info_ != nullptr) break;
    info_ = nullptr;
  }
  if (ret != 0 || info_ == nullptr) {
    info_ = nullptr;
    return absl::UnavailableError(absl::StrCat(
        "no fabric: fi_getinfo(", options_.provider, ") found none",
        node != nullptr ? absl::StrCat(" for ", node) : std::string(), ": ",
        fi_strerror(-ret),
        options_.provider == "verbs"
            ? " (no RDMA device, or its driver is missing)"
            : ""));
  }
  provider_ = info_->fabric_attr->prov_name;
  const uint64_t mr_mode = info_->domain_attr->mr_mode;
  const uint64_t mode = info_->mode | info_->rx_attr->mode;
  mode_.provider_rx_cq_data = (mode & FI_RX_CQ_DATA) != 0;
  mode_.provider_virt_addr = (mr_mode & FI_MR_VIRT_ADDR) != 0;
  mode_.provider_local = (mr_mode & FI_MR_LOCAL) != 0;
  mode_.provider_prov_key = (mr_mode & FI_MR_PROV_KEY) != 0;
  mode_.local = options_.verbs_style || mode_.provider_local;
  mode_.prov_key = options_.verbs_style || mode_.provider_prov_key;
  mode_.rx_cq_data = options_.verbs_style || mode_.provider_rx_cq_data;
  key_bytes_ = std::min<size_t>(8, info_->domain_attr->mr_key_size);
  thread_safe_ = info_->domain_attr->threading == FI_THREAD_SAFE;
  if (info_->domain_attr->cq_data_size < 4) {
    return absl::UnavailableError(
        absl::StrCat("fabric provider ", provider_, " carries ",
                     info_->domain_attr->cq_data_size,
                     " bytes of immediate data; ", "Starling needs 4"));
  }

  ret = fi_fabric(info_->fabric_attr, &fabric_, nullptr);
  if (ret != 0) return absl::UnavailableError(FiError("fi_fabric", ret));
  ret = fi_domain(fabric_, info_, &domain_, nullptr);
  if (ret != 0) return absl::UnavailableError(FiError("fi_domain", ret));
  struct fi_cq_attr cq_attr = {};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  cq_attr.wait_obj = FI_WAIT_UNSPEC;
  cq_attr.size = static_cast<size_t>(size_) * options_.slots * 4 + 64;
  ret = fi_cq_open(domain_, &cq_attr, &cq_, nullptr);
  if (ret != 0) return absl::UnavailableError(FiError("fi_cq_open", ret));
  struct fi_av_attr av_attr = {};
  av_attr.type = FI_AV_TABLE;
  av_attr.count = static_cast<size_t>(size_);
  ret = fi_av_open(domain_, &av_attr, &av_, nullptr);
  if (ret != 0) return absl::UnavailableError(FiError("fi_av_open", ret));
  ret = fi_endpoint(domain_, info_, &ep_, nullptr);
  if (ret != 0) return absl::UnavailableError(FiError("fi_endpoint", ret));
  ret = fi_ep_bind(ep_, &av_->fid, 0);
  if (ret != 0) return absl::UnavailableError(FiError("fi_ep_bind(av)", ret));
  ret = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV);
  if (ret != 0) return absl::UnavailableError(FiError("fi_ep_bind(cq)", ret));
  ret = fi_enable(ep_);
  if (ret != 0) return absl::UnavailableError(FiError("fi_enable", ret));
  char address[512];
  size_t address_len = sizeof(address);
  ret = fi_getname(&ep_->fid, address, &address_len);
  if (ret != 0) return absl::UnavailableError(FiError("fi_getname", ret));
  address_.assign(address, address_len);

  // Registered once, here.
  const size_t slot_area = SlotAreaBytes(options_);
  credit_cells_ =
      reinterpret_cast<uint64_t*>(MapRemoteWritable(CreditCellsBytes(size_)));
  credit_source_ = reinterpret_cast<uint64_t*>(AllocateZeroed(64));
  if (credit_cells_ == nullptr || credit_source_ == nullptr) {
    return absl::ResourceExhaustedError("fabric credit cells");
  }
  STARLING_RETURN_IF_ERROR(
      Register(credit_source_, sizeof(uint64_t), FI_WRITE, &credit_source_mr_));
  peers_.resize(size_);
  for (int p = 0; p < size_; ++p) {
    peers_[p] = std::make_unique<Peer>();
    if (p == rank_) continue;
    Peer& peer = *peers_[p];
    peer.recv = MapRemoteWritable(slot_area);
    peer.send = AllocateZeroed(slot_area);
    if (peer.recv == nullptr || peer.send == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("fabric slots of ", slot_area, " bytes"));
    }
    STARLING_RETURN_IF_ERROR(
        Register(peer.recv, slot_area, FI_REMOTE_WRITE, &peer.recv_mr));
    STARLING_RETURN_IF_ERROR(
        Register(peer.send, slot_area, FI_WRITE, &peer.send_mr));
    STARLING_RETURN_IF_ERROR(Register(&credit_cells_[p], sizeof(uint64_t),
                                      FI_REMOTE_WRITE, &peer.credit_mr));
    peer.data_ops.reset(new Op[options_.slots]);
    peer.credit_ops.reset(new Op[options_.slots]);
    for (uint32_t s = 0; s < options_.slots; ++s) {
      peer.data_ops[s].kind = Op::Kind::kData;
      peer.credit_ops[s].kind = Op::Kind::kCredit;
      peer.data_ops[s].peer = peer.credit_ops[s].peer = p;
      peer.data_ops[s].slot = peer.credit_ops[s].slot = static_cast<int>(s);
    }
  }
  // Every immediate this rank can be sent at once: a data part per slot of
  // each peer, and a credit per slot this rank writes to each peer.
  // And one for the probe below, whose receive is posted again after it.
  receive_op_count_ = 2 * (size_ - 1) * static_cast<int>(options_.slots) + 1;
  receive_ops_.reset(new Op[receive_op_count_]);
  for (int i = 0; i < receive_op_count_; ++i) {
    receive_ops_[i].kind = Op::Kind::kReceive;
  }
  if (mode_.rx_cq_data) {
    for (int i = 0; i < receive_op_count_; ++i) {
      STARLING_RETURN_IF_ERROR(PostReceive(&receive_ops_[i]));
    }
  }
  return ProbeAddressing();
}

absl::Status FabricPath::ProbeAddressing() {
  // One write-with-immediate to this endpoint itself, addressed as an
  // offset, then (if it did not land) as a virtual address: the target side
  // of a provider treats addresses as its mr_mode says, except ofi_rxm over
  // tcp in libfabric 1.17, which reports neither and was seen to use
  // offsets in one process and virtual addresses in another.
  uint64_t* cell = reinterpret_cast<uint64_t*>(MapRemoteWritable(64));
  uint64_t* source = reinterpret_cast<uint64_t*>(AllocateZeroed(64));
  fid_mr* cell_mr = nullptr;
  fid_mr* source_mr = nullptr;
  fi_addr_t self = FI_ADDR_UNSPEC;
  absl::Status status;
  auto cleanup = [&] {
    if (cell_mr != nullptr) fi_close(&cell_mr->fid);
    if (source_mr != nullptr) fi_close(&source_mr->fid);
    UnmapRemoteWritable(cell, 64);
    std::free(source);
  };
  if (cell == nullptr || source == nullptr) {
    cleanup();
    return absl::ResourceExhaustedError("fabric probe cells");
  }
  status = Register(cell, 64, FI_REMOTE_WRITE, &cell_mr);
  if (status.ok()) status = Register(source, 64, FI_WRITE, &source_mr);
  if (status.ok() &&
      fi_av_insert(av_, address_.data(), 1, &self, 0, nullptr) != 1) {
    status = absl::UnavailableError(
        "fabric: cannot insert this endpoint's own address");
  }
  if (!status.ok()) {
    cleanup();
    return status;
  }
  const uint64_t key = fi_mr_key(cell_mr);
  // What an earlier path of this process found is tried first.
  static std::atomic<int> found{0};  // 1: offsets, 2: virtual addresses
  const bool virtual_first = found.load(std::memory_order_relaxed) == 2;
  const bool virtual_addresses[2] = {virtual_first, !virtual_first};
  // A write in the wrong mode lands nothing and says nothing, so the first
  // has a second to land before the second is posted; then either may land
  // until the probe's end (a busy host's first write can be the slow one:
  // each attempt writes its own word, so the word in the cell tells which
  // landed). Waits block on the completion queue rather than spin, so that
  // the paths opening at once on one host (a group's daemons under test,
  // every path of a process) do not starve each other's progress.
  Op ops[2];
  bool posted[2] = {false, false};
  bool wrote[2] = {false, false};
  int landed = -1;
  const absl::Time start = absl::Now();
  const absl::Time end = start + kProbeWait;
  // One completion, if one comes within 10 ms: an immediate (the cell's
  // word says which attempt landed) or our own write's end.
  auto poll = [&] {
    struct fi_cq_data_entry entry;
    const ssize_t n = fi_cq_sread(cq_, &entry, 1, nullptr, 10);
    void* context = nullptr;
    if (n == 1 && (entry.flags & FI_REMOTE_CQ_DATA) != 0) {
      if (mode_.rx_cq_data) status.Update(TakeReceive(entry));
      for (int a = 0; a < 2; ++a) {
        if (posted[a] && cell[1] == source[a]) landed = a;
      }
    } else if (n == 1) {
      context = entry.op_context;
    } else if (n == -FI_EAVAIL) {
      struct fi_cq_err_entry err = {};
      if (fi_cq_readerr(cq_, &err, 0) == 1) context = err.op_context;
    }
    for (int a = 0; a < 2; ++a) {
      if (context != nullptr && context == &ops[a].context) wrote[a] = true;
    }
  };
  auto take = [&](absl::Time until) {
    while (landed < 0 && absl::Now() < until) poll();
  };
  for (int a = 0; a < 2 && landed < 0; ++a) {
    source[a] = virtual_addresses[a] ? 0x5649525455414cu : 0x4f4646534554u;
    const uint64_t target =
        virtual_addresses[a] ? reinterpret_cast<uint64_t>(cell) + 8 : 8;
    const absl::Time until = a == 0 ? start + absl::Seconds(1) : end;
    ssize_t ret;
    do {
      ret = fi_writedata(ep_, &source[a], sizeof(uint64_t),
                         mode_.local ? fi_mr_desc(source_mr) : nullptr, 0, self,
                         target, key, &ops[a].context);
      if (ret == -FI_EAGAIN) take(absl::Now() + absl::Milliseconds(10));
    } while (ret == -FI_EAGAIN && landed < 0 && absl::Now() < until);
    posted[a] = ret == 0;
    if (landed < 0) take(until);
  }
  // Our own writes' completions too, so that nothing of the probe is left
  // in flight when its memory goes.
  const absl::Time drained = absl::Now() + absl::Seconds(1);
  while (((posted[0] && !wrote[0]) || (posted[1] && !wrote[1])) &&
         absl::Now() < drained) {
    poll();
  }
  fi_av_remove(av_, &self, 1, 0);
  cleanup();
  if (landed >= 0) {
    mode_.provider_virt_addr = virtual_addresses[landed];
    found.store(virtual_addresses[landed] ? 2 : 1, std::memory_order_relaxed);
    return status;
  }
  return absl::UnavailableError(absl::StrCat(
      "fabric provider ", provider_, ": a write-with-immediate to this ",
      "endpoint itself did not land within ", absl::FormatDuration(kProbeWait),
      ", addressed as an offset or as a virtual address"));
}

absl::Status FabricPath::Register(void* buf, size_t len, uint64_t access,
                                  fid_mr** mr) {
  // Caller keys are random, so a key of another peer or of an earlier run
  // names nothing here; providers that pick keys ignore it (as ofi_rxm
  // over tcp does: MapRemoteWritable's random addresses stand in there).
  STARLING_ASSIGN_OR_RETURN(uint64_t key,
                            SecureRandom64("a fabric memory key"));
  if (key_bytes_ < 8) key &= (uint64_t{1} << (8 * key_bytes_)) - 1;
  registrations_.fetch_add(1, std::memory_order_relaxed);
  const int ret = fi_mr_reg(domain_, buf, len, access, 0, key, 0, mr, nullptr);
  if (ret != 0) {
    *mr = nullptr;
    return absl::UnavailableError(absl::StrCat(
        "fabric provider ", provider_, " refused to register ", len,
        " bytes: ", FiError("fi_mr_reg", ret), "; ulimit -l is ",
        MemlockLimitText(), ", registered memory needs at least ",
        2 * static_cast<size_t>(size_) * options_.slots * options_.slot_bytes /
            1024,
        " KiB (LimitMEMLOCK=infinity in the unit)"));
  }
  return absl::OkStatus();
}

absl::Status FabricPath::PostReceive(Op* op) {
  if (mode_.provider_rx_cq_data) {
    if (op == nullptr) {
      return absl::InternalError("fabric: an immediate took no known receive");
    }
    const ssize_t ret =
        fi_recv(ep_, nullptr, 0, nullptr, FI_ADDR_UNSPEC, &op->context);
    if (ret != 0) {
      return absl::UnavailableError(
          FiError("fi_recv (a receive for an immediate)", ret));
    }
  }
  // Emulated (verbs_style on a provider that does not consume receives):
  // the same count is kept, and an immediate that finds none is an error.
  ++receives_posted_;
  return absl::OkStatus();
}

absl::Status FabricPath::TakeReceive(const ::fi_cq_data_entry& entry) {
  if (receives_posted_ == 0) {
    return absl::InternalError(
        "fabric: an immediate arrived with no receive posted (FI_RX_CQ_DATA)");
  }
  --receives_posted_;
  return PostReceive(static_cast<Op*>(entry.op_context));
}

uint64_t FabricPath::ProviderAddress(uint64_t base, uint64_t offset) const {
  // Computed as verbs wants it (the peer's virtual base plus the offset); a
  // provider that addresses by offset gets the offset back.
  const uint64_t virtual_address = base + offset;
  return mode_.provider_virt_addr ? virtual_address : virtual_address - base;
}

FabricPath::~FabricPath() {
  Stop();
  std::vector<Completion*> orphans;
  {
    absl::MutexLock lock(&mu_);
    for (auto& peer : peers_) {
      if (peer == nullptr) continue;
      for (Outgoing& w : peer->queue) orphans.push_back(w.done);
      peer->queue.clear();
    }
  }
  for (Completion* done : orphans) {
    done->Finish(absl::FailedPreconditionError(
        absl::StrCat(name_(rank_), " shut its fabric path down")));
  }
  if (ep_ != nullptr) fi_close(&ep_->fid);
  for (auto& peer : peers_) {
    if (peer == nullptr) continue;
    for (fid_mr* mr : {peer->recv_mr, peer->send_mr, peer->credit_mr}) {
      if (mr != nullptr) fi_close(&mr->fid);
    }
    UnmapRemoteWritable(peer->recv, SlotAreaBytes(options_));
    std::free(peer->send);
  }
  if (credit_source_mr_ != nullptr) fi_close(&credit_source_mr_->fid);
  if (av_ != nullptr) fi_close(&av_->fid);
  if (cq_ != nullptr) fi_close(&cq_->fid);
  if (domain_ != nullptr) fi_close(&domain_->fid);
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
  UnmapRemoteWritable(credit_cells_, CreditCellsBytes(size_));
  std::free(credit_source_);
  if (info_ != nullptr) fi_freeinfo(info_);
}

FabricHello FabricPath::HelloFor(int peer) const {
  FabricHello hello;
  hello.usable = true;
  hello.rank = static_cast<uint32_t>(rank_);
  hello.size = static_cast<uint32_t>(size_);
  hello.slot_bytes = options_.slot_bytes;
  hello.slots = options_.slots;
  hello.provider = provider_;
  hello.text = address_;
  if (peer >= 0 && peer < size_ && peer != rank_) {
    const Peer& p = *peers_[peer];
    hello.recv_base = reinterpret_cast<uint64_t>(p.recv);
    hello.recv_key = fi_mr_key(p.recv_mr);
    hello.credit_base = reinterpret_cast<uint64_t>(&credit_cells_[peer]);
    hello.credit_key = fi_mr_key(p.credit_mr);
  }
  return hello;
}

absl::Status FabricPath::Connect(int peer, const FabricHello& hello) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat("fabric: no peer ", peer, " in a group of ", size_));
  }
  if (hello.rank != static_cast<uint32_t>(peer) ||
      hello.size != static_cast<uint32_t>(size_)) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_(peer), " sent a fabric HELLO as rank ", hello.rank, " of ",
        hello.size, "; this group has it as rank ", peer, " of ", size_));
  }
  if (hello.provider != provider_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_(peer), " uses fabric provider '", hello.provider,
                     "', ", name_(rank_), " '", provider_, "'"));
  }
  if (hello.slots != options_.slots ||
      hello.slot_bytes != options_.slot_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_(peer), " has ", hello.slots, " fabric slots of ",
                     hello.slot_bytes, " bytes, ", name_(rank_), " ",
                     options_.slots, " of ", options_.slot_bytes));
  }
  fi_addr_t addr = FI_ADDR_UNSPEC;
  const int inserted =
      fi_av_insert(av_, hello.text.data(), 1, &addr, 0, nullptr);
  if (inserted != 1) {
    return absl::UnavailableError(
        absl::StrCat("fabric: cannot reach ", name_(peer),
                     "'s endpoint: ", FiError("fi_av_insert", inserted)));
  }
  absl::MutexLock lock(&mu_);
  Peer& p = *peers_[peer];
  p.addr = addr;
  p.recv_base = hello.recv_base;
  p.recv_key = hello.recv_key;
  p.credit_base = hello.credit_base;
  p.credit_key = hello.credit_key;
  p.free_slots.clear();
  for (int s = static_cast<int>(options_.slots) - 1; s >= 0; --s) {
    p.free_slots.push_back(s);
  }
  p.connected = true;
  return absl::OkStatus();
}

std::string FabricPath::name() const {
  return absl::StrCat("fabric (", provider_, ")");
}

void FabricPath::Attach(Sink sink) {
  {
    absl::MutexLock lock(&mu_);
    if (attached_) return;
    sink_ = std::move(sink);
    attached_ = true;
  }
  STARLING_LOG(INFO) << name_(rank_) << ": fabric path over " << provider_
                     << " (" << mode_.ToString() << "), " << options_.slots
                     << " slots of " << options_.slot_bytes / 1024
                     << " KiB per peer";
  thread_ = std::thread([this] { Loop(); });
}

void FabricPath::PostWrite(int peer, absl::Span<const std::byte> data,
                           RegionId remote, uint64_t remote_offset_bytes,
                           uint32_t imm, Completion* done) {
  const uint64_t payload = options_.slot_bytes - kSlotHeaderBytes;
  const uint64_t parts =
      data.empty() ? 1 : (data.size() + payload - 1) / payload;
  absl::Status failed;
  Peer& p = *peers_[peer];
  Outgoing w;
  // A write of one part to a peer with nothing queued and a free slot is
  // copied and posted on the caller's thread (where the provider allows
  // that): no hop to the progress thread on a small write's way out.
  bool direct = false;
  int slot = -1;
  fi_addr_t addr = FI_ADDR_UNSPEC;
  uint64_t remote_address = 0;
  uint64_t key = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!p.failed.ok()) {
      failed = p.failed;
    } else if (!p.connected) {
      failed = absl::FailedPreconditionError(
          absl::StrCat("fabric: ", name_(peer), " never sent its HELLO"));
    } else if (parts > UINT32_MAX) {
      failed = absl::InvalidArgumentError(
          absl::StrCat("write of ", data.size(), " bytes to ", name_(peer),
                       " needs ", parts, " fabric slots"));
    } else {
      w.data = data;
      w.region = remote;
      w.offset = remote_offset_bytes;
      w.imm = imm;
      w.seq = p.next_seq++;
      w.parts = static_cast<uint32_t>(parts);
      w.done = done;
      if (thread_safe_ && parts == 1 && p.queue.empty() &&
          !p.free_slots.empty() && !stopping_) {
        direct = true;
        slot = p.free_slots.back();
        p.free_slots.pop_back();
        ++p.copying;
        addr = p.addr;
        remote_address = ProviderAddress(
            p.recv_base, static_cast<uint64_t>(slot) * options_.slot_bytes);
        key = p.recv_key;
      } else {
        p.queue.push_back(w);
      }
    }
  }
  if (!failed.ok()) {
    done->Finish(failed);
    return;
  }
  if (direct) {
    const ssize_t ret = PostPart(&p, slot, w, 0, addr, remote_address, key);
    {
      absl::MutexLock lock(&mu_);
      --p.copying;
      changed_.SignalAll();
      if (ret == 0) {
        parts_written_.fetch_add(1, std::memory_order_relaxed);
      } else {
        p.free_slots.push_back(slot);
        // Writes queued meanwhile have later sequence numbers.
        if (ret == -FI_EAGAIN && p.failed.ok()) p.queue.push_front(w);
      }
    }
    if (ret == 0) {
      done->Finish(absl::OkStatus());
      return;
    }
    if (ret != -FI_EAGAIN) {
      const absl::Status refused = absl::UnavailableError(absl::StrCat(
          "fabric write to ", name_(peer),
          " refused: ", FiError("fi_writedata", static_cast<int>(ret))));
      Report(peer, refused);
      done->Finish(refused);
      return;
    }
  }
  Signal();
}

void FabricPath::FailPeer(int peer, const absl::Status& why) {
  if (peer < 0 || peer >= size_ || peer == rank_) return;
  std::deque<Outgoing> pending;
  {
    absl::MutexLock lock(&mu_);
    Peer& p = *peers_[peer];
    if (!p.failed.ok()) return;
    p.failed = why.ok() ? absl::AbortedError("aborted") : why;
    // The progress thread may be copying a queued write's bytes.
    while (p.copying > 0) changed_.Wait(&mu_);
    pending.swap(p.queue);
    changed_.SignalAll();
  }
  for (Outgoing& w : pending) w.done->Finish(why);
  Signal();
}

void FabricPath::Wake() {
  wake_generation_.fetch_add(1, std::memory_order_acq_rel);
  Signal();
}

void FabricPath::Drain(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stopping_) return true;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const Peer& p = *peers_[r];
      if (!p.connected || !p.failed.ok()) continue;
      if (!p.queue.empty() || p.free_slots.size() < options_.slots) {
        return false;
      }
    }
    return true;
  };
  while (!drained()) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) break;
  }
}

void FabricPath::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    changed_.SignalAll();
  }
  Signal();
  if (thread_.joinable()) thread_.join();
}

void FabricPath::Signal() {
  if (cq_ != nullptr) fi_cq_signal(cq_);
}

void FabricPath::Report(int peer, const absl::Status& why) {
  std::function<void(int, const absl::Status&)> fail;
  {
    absl::MutexLock lock(&mu_);
    fail = sink_.fail_peer;
  }
  if (fail) {
    fail(peer, why);
  } else {
    FailPeer(peer, why);
  }
}

void FabricPath::Loop() {
  absl::Time idle_since = absl::Now();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    bool did = ReadCompletions(/*block=*/false);
    did |= DeliverArrived();
    did |= PostCredits();
    did |= SendQueued();
    if (did) {
      idle_since = absl::Now();
      continue;
    }
    if (options_.spin > absl::ZeroDuration() &&
        absl::Now() - idle_since < options_.spin) {
      continue;
    }
    ReadCompletions(/*block=*/true);
  }
}

bool FabricPath::ReadCompletions(bool block) {
  struct fi_cq_data_entry entries[kCompletionBatch];
  const ssize_t n =
      block ? fi_cq_sread(cq_, entries, kCompletionBatch, nullptr, kBlockMillis)
            : fi_cq_read(cq_, entries, kCompletionBatch);
  if (n > 0) {
    for (ssize_t i = 0; i < n; ++i) HandleCompletion(entries[i]);
    return true;
  }
  if (n == -FI_EAVAIL) {
    HandleError();
    return true;
  }
  return false;
}

void FabricPath::HandleCompletion(const ::fi_cq_data_entry& entry) {
  if ((entry.flags & FI_REMOTE_CQ_DATA) == 0) return;  // our own write ended
  if (mode_.rx_cq_data) {
    absl::Status posted = TakeReceive(entry);
    if (!posted.ok()) STARLING_LOG(ERROR) << name_(rank_) << ": " << posted;
  }
  const uint32_t imm = static_cast<uint32_t>(entry.data);
  const int peer = static_cast<int>((imm >> 16) & 0x7fff);
  const int slot = static_cast<int>(imm & 0xffff);
  if (peer >= size_ || peer == rank_ ||
      slot >= static_cast<int>(options_.slots)) {
    STARLING_LOG(ERROR) << name_(rank_) << ": fabric immediate 0x" << std::hex
                        << imm << std::dec << " names no peer's slot; dropped";
    return;
  }
  Peer& p = *peers_[peer];
  if ((imm & kCreditBit) == 0) {
    p.arrived.push_back(slot);
    return;
  }
  absl::Status bad;
  {
    absl::MutexLock lock(&mu_);
    if (std::find(p.free_slots.begin(), p.free_slots.end(), slot) !=
        p.free_slots.end()) {
      bad = absl::DataLossError(
          absl::StrCat(name_(peer), " returned a fabric credit for slot ", slot,
                       ", which had nothing in flight"));
    } else {
      p.free_slots.push_back(slot);
      changed_.SignalAll();
    }
  }
  if (!bad.ok()) Report(peer, bad);
}

void FabricPath::HandleError() {
  struct fi_cq_err_entry err = {};
  if (fi_cq_readerr(cq_, &err, 0) != 1) return;
  const char* detail =
      fi_cq_strerror(cq_, err.prov_errno, err.err_data, nullptr, 0);
  const Op* op = static_cast<const Op*>(err.op_context);
  if (err.err == FI_ECANCELED && op != nullptr &&
      op->kind == Op::Kind::kReceive) {
    return;  // a posted receive cancelled at close
  }
  if (op == nullptr || op->peer < 0) {
    STARLING_LOG(ERROR) << name_(rank_) << ": fabric completion error "
                        << fi_strerror(err.err) << " ("
                        << (detail != nullptr ? detail : "") << ")";
    return;
  }
  Report(op->peer,
         absl::UnavailableError(absl::StrCat(
             "fabric ", op->kind == Op::Kind::kData ? "write" : "credit",
             " to ", name_(op->peer), " failed: ", fi_strerror(err.err),
             detail != nullptr ? absl::StrCat(" (", detail, ")") : "")));
}

ssize_t FabricPath::PostPart(Peer* p, int slot, const Outgoing& w,
                             uint32_t part, fi_addr_t addr, uint64_t remote,
                             uint64_t key) {
  const uint64_t payload = options_.slot_bytes - kSlotHeaderBytes;
  const uint64_t begin = uint64_t{part} * payload;
  const uint64_t length = std::min<uint64_t>(
      payload, w.data.size() - std::min<uint64_t>(begin, w.data.size()));
  FrameHeader header;
  header.type = FrameType::kWrite;
  header.region = w.region;
  header.offset = w.offset + begin;
  header.length = length;
  header.imm = w.imm;
  header.seq = w.seq;
  header.part_count = w.parts;
  std::byte* dst = p->send + static_cast<size_t>(slot) * options_.slot_bytes;
  EncodeSlotHeader(header, dst);
  if (length > 0) {
    std::memcpy(dst + kSlotHeaderBytes, w.data.data() + begin, length);
  }
  return fi_writedata(ep_, dst, kSlotHeaderBytes + length,
                      mode_.local ? fi_mr_desc(p->send_mr) : nullptr,
                      DataImm(rank_, slot), addr, remote, key,
                      &p->data_ops[slot].context);
}

bool FabricPath::SendQueued() {
  bool did = false;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    Peer& p = *peers_[r];
    while (true) {
      Outgoing* w = nullptr;
      int slot = -1;
      fi_addr_t addr;
      uint64_t remote = 0;
      uint64_t key = 0;
      {
        absl::MutexLock lock(&mu_);
        if (stopping_ || !p.connected || !p.failed.ok() || p.queue.empty() ||
            p.free_slots.empty()) {
          break;
        }
        w = &p.queue.front();
        slot = p.free_slots.back();
        p.free_slots.pop_back();
        ++p.copying;
        addr = p.addr;
        remote = ProviderAddress(
            p.recv_base, static_cast<uint64_t>(slot) * options_.slot_bytes);
        key = p.recv_key;
      }
      const ssize_t ret =
          PostPart(&p, slot, *w, w->next_part, addr, remote, key);
      Completion* finished = nullptr;
      {
        absl::MutexLock lock(&mu_);
        --p.copying;
        changed_.SignalAll();
        if (ret == 0) {
          parts_written_.fetch_add(1, std::memory_order_relaxed);
          if (++w->next_part == w->parts) {
            finished = w->done;
            p.queue.pop_front();
          }
        } else {
          p.free_slots.push_back(slot);
        }
      }
      if (finished != nullptr) finished->Finish(absl::OkStatus());
      if (ret == -FI_EAGAIN) break;  // the provider's queue is full
      if (ret != 0) {
        Report(r, absl::UnavailableError(absl::StrCat(
                      "fabric write to ", name_(r), " refused: ",
                      FiError("fi_writedata", static_cast<int>(ret)))));
        break;
      }
      did = true;
    }
  }
  return did;
}

bool FabricPath::DeliverArrived() {
  Inbox* inbox = nullptr;
  {
    absl::MutexLock lock(&mu_);
    inbox = sink_.inbox;
  }
  if (inbox == nullptr) return false;
  bool did = false;
  const uint64_t generation = wake_generation_.load(std::memory_order_acquire);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    Peer& p = *peers_[r];
    if (p.arrived.empty()) continue;
    if (p.paused && p.paused_at == generation) continue;
    {
      absl::MutexLock lock(&mu_);
      if (!p.failed.ok()) {
        p.arrived.clear();
        continue;
      }
    }
    while (!p.arrived.empty()) {
      const int slot = p.arrived.front();
      const std::byte* src =
          p.recv + static_cast<size_t>(slot) * options_.slot_bytes;
      absl::StatusOr<FrameHeader> header =
          DecodeSlotHeader(src, options_.slot_bytes);
      absl::Status status = header.status();
      Inbox::Landing landing;
      bool must_wait = false;
      if (status.ok()) {
        status = inbox->BeginWrite(r, *header, &landing, &must_wait);
      }
      if (status.ok() && must_wait) {
        p.paused = true;
        p.paused_at = generation;
        break;
      }
      if (status.ok()) {
        p.paused = false;
        if (landing.dst != nullptr) {
          if (Inbox::LandingValid(landing)) {
            std::memcpy(landing.dst, src + kSlotHeaderBytes, header->length);
          } else {
            inbox->DivertLanding(&landing);
          }
        }
        status = inbox->EndWrite(r, &landing);
      }
      if (!status.ok()) {
        p.arrived.clear();
        Report(r, absl::Status(status.code(),
                               absl::StrCat(name_(r), " wrote fabric slot ",
                                            slot, ": ", status.message())));
        break;
      }
      p.arrived.pop_front();
      p.credits_due.push_back(slot);
      did = true;
    }
  }
  return did;
}

bool FabricPath::PostCredits() {
  bool did = false;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    Peer& p = *peers_[r];
    if (p.credits_due.empty()) continue;
    fi_addr_t addr;
    uint64_t remote = 0;
    uint64_t key = 0;
    {
      absl::MutexLock lock(&mu_);
      if (!p.failed.ok()) {
        p.credits_due.clear();
        continue;
      }
      addr = p.addr;
      remote = ProviderAddress(p.credit_base, 0);
      key = p.credit_key;
    }
    while (!p.credits_due.empty()) {
      const int slot = p.credits_due.front();
      const ssize_t ret =
          fi_writedata(ep_, credit_source_, sizeof(uint64_t),
                       mode_.local ? fi_mr_desc(credit_source_mr_) : nullptr,
                       kCreditBit | DataImm(rank_, slot), addr, remote, key,
                       &p.credit_ops[slot].context);
      if (ret == -FI_EAGAIN) break;
      if (ret != 0) {
        p.credits_due.clear();
        Report(r, absl::UnavailableError(absl::StrCat(
                      "fabric credit to ", name_(r), " refused: ",
                      FiError("fi_writedata", static_cast<int>(ret)))));
        break;
      }
      p.credits_due.pop_front();
      did = true;
    }
  }
  return did;
}

}  // namespace fabric
}  // namespace transport
}  // namespace starling
