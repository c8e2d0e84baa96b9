#include "server/node/sync/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "proto/checkpoint.pb.h"
#include "server/base/durable_file.h"
#include "server/base/logging.h"

namespace starling {
namespace node {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoints hold float32 little endian as the host does");

constexpr absl::string_view kMagic = "STARCKPT";
constexpr uint32_t kFormat = 1;
constexpr size_t kDigestBytes = 32;  // SHA-256
constexpr size_t kPrefix = 8 + 4 + 4;

void PutU32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  }
  return v;
}

// "version-12" -> 12.
std::optional<int64_t> VersionOf(const std::string& name) {
  int64_t v = 0;
  if (!absl::StartsWith(name, "version-") ||
      !absl::SimpleAtoi(absl::string_view(name).substr(8), &v) || v < 0) {
    return std::nullopt;
  }
  return v;
}

struct FileName {
  uint64_t epoch = 0;
  int rank = 0;
  int ranks = 0;
};

// "epoch-3-rank-1-of-4.ckpt".
std::optional<FileName> ParseFileName(absl::string_view name) {
  if (!absl::ConsumeSuffix(&name, ".ckpt")) return std::nullopt;
  const std::vector<absl::string_view> parts = absl::StrSplit(name, '-');
  FileName f;
  if (parts.size() != 6 || parts[0] != "epoch" || parts[2] != "rank" ||
      parts[4] != "of" || !absl::SimpleAtoi(parts[1], &f.epoch) ||
      !absl::SimpleAtoi(parts[3], &f.rank) ||
      !absl::SimpleAtoi(parts[5], &f.ranks) || f.ranks < 1 || f.rank < 0 ||
      f.rank >= f.ranks) {
    return std::nullopt;
  }
  return f;
}

size_t Elements(const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
  size_t n = 0;
  for (const auto& [begin, end] : ranges) n += end - begin;
  return n;
}

}  // namespace

CheckpointFolder::CheckpointFolder(std::string root, uint64_t run_id)
    : run_id_(run_id),
      run_folder_(absl::StrCat(std::move(root), "/run-", run_id)) {}

std::string CheckpointFolder::PathOf(int64_t version, uint64_t epoch, int rank,
                                     int ranks) const {
  return absl::StrCat(run_folder_, "/version-", version, "/epoch-", epoch,
                      "-rank-", rank, "-of-", ranks, ".ckpt");
}

absl::Status CheckpointFolder::Write(const ShardCheckpoint& shard) const {
  const std::string path =
      PathOf(shard.version, shard.group_epoch, shard.rank, shard.ranks);
  std::error_code error;
  std::filesystem::create_directories(FolderOf(path), error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("creating the checkpoint folder ", FolderOf(path), ": ",
                     error.message()));
  }
  proto::CheckpointHeader header;
  header.set_run_id(shard.run_id);
  header.set_version(shard.version);
  header.set_group_epoch(shard.group_epoch);
  header.set_rank(shard.rank);
  header.set_ranks(shard.ranks);
  header.set_elements(shard.elements);
  header.set_optimizer(shard.optimizer);
  header.set_state_slots(shard.state_slots);
  for (const auto& [begin, end] : shard.ranges) {
    proto::CheckpointHeader::Range* range = header.add_ranges();
    range->set_begin(begin);
    range->set_end(end);
  }
  header.set_written_unix_seconds(absl::ToUnixSeconds(absl::Now()));
  const std::string head = header.SerializeAsString();
  std::string bytes(kMagic);
  PutU32(kFormat, &bytes);
  PutU32(static_cast<uint32_t>(head.size()), &bytes);
  bytes += head;
  bytes.append(reinterpret_cast<const char*>(shard.master.data()),
               shard.master.size() * sizeof(float));
  bytes.append(reinterpret_cast<const char*>(shard.state.data()),
               shard.state.size() * sizeof(float));
  bytes += Sha256(bytes);
  return WriteFileDurably(path, bytes);
}

absl::StatusOr<ShardCheckpoint> CheckpointFolder::Read(
    const WholeVersion& whole, int rank) const {
  const std::string path =
      PathOf(whole.version, whole.epoch, rank, whole.ranks);
  absl::StatusOr<std::string> read = ReadWholeFile(path, "the checkpoint");
  if (!read.ok()) return read.status();
  const std::string& bytes = *read;
  const auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("the checkpoint ", path, " is not whole (", why, ")"));
  };
  if (bytes.size() < kPrefix + kDigestBytes ||
      absl::string_view(bytes).substr(0, kMagic.size()) != kMagic) {
    return corrupt("it does not begin with STARCKPT");
  }
  const absl::string_view body =
      absl::string_view(bytes).substr(0, bytes.size() - kDigestBytes);
  if (Sha256(body) != absl::string_view(bytes).substr(body.size())) {
    return corrupt("its SHA-256 does not match");
  }
  if (GetU32(bytes.data() + 8) != kFormat) {
    return corrupt(absl::StrCat("format ", GetU32(bytes.data() + 8),
                                ", this daemon reads ", kFormat));
  }
  const size_t head = GetU32(bytes.data() + 12);
  proto::CheckpointHeader header;
  if (head > body.size() - kPrefix ||
      !header.ParseFromArray(bytes.data() + kPrefix, static_cast<int>(head))) {
    return corrupt("its header does not parse");
  }
  ShardCheckpoint shard;
  shard.run_id = header.run_id();
  shard.version = header.version();
  shard.group_epoch = header.group_epoch();
  shard.rank = header.rank();
  shard.ranks = header.ranks();
  shard.elements = header.elements();
  shard.optimizer = header.optimizer();
  shard.state_slots = header.state_slots();
  for (const proto::CheckpointHeader::Range& r : header.ranges()) {
    if (r.begin() > r.end() || r.end() > shard.elements) {
      return corrupt(absl::StrCat("range [", r.begin(), ", ", r.end(),
                                  ") outside its ", shard.elements,
                                  " elements"));
    }
    shard.ranges.emplace_back(r.begin(), r.end());
  }
  if (shard.run_id != run_id_ || shard.version != whole.version ||
      shard.group_epoch != whole.epoch || shard.rank != rank ||
      shard.ranks != whole.ranks) {
    return corrupt(absl::StrCat(
        "it holds run ", shard.run_id, " version ", shard.version, " of rank ",
        shard.rank, " of ", shard.ranks, " in group epoch ", shard.group_epoch,
        ", its name says run ", run_id_, " version ", whole.version,
        " of rank ", rank, " of ", whole.ranks, " in group epoch ",
        whole.epoch));
  }
  if (shard.state_slots < 0) return corrupt("negative state slots");
  const size_t n = Elements(shard.ranges);
  const size_t values = n * (1 + static_cast<size_t>(shard.state_slots));
  const size_t data = body.size() - kPrefix - head;
  if (data != values * sizeof(float)) {
    return corrupt(absl::StrCat(data, " bytes of values, its header needs ",
                                values * sizeof(float)));
  }
  const char* p = bytes.data() + kPrefix + head;
  shard.master.resize(n);
  std::memcpy(shard.master.data(), p, n * sizeof(float));
  shard.state.resize(values - n);
  std::memcpy(shard.state.data(), p + n * sizeof(float),
              (values - n) * sizeof(float));
  return shard;
}

std::vector<WholeVersion> CheckpointFolder::WholeVersions() const {
  std::vector<WholeVersion> out;
  std::error_code error;
  std::filesystem::directory_iterator versions(run_folder_, error);
  if (error) return out;
  for (const std::filesystem::directory_entry& entry : versions) {
    const std::optional<int64_t> version =
        VersionOf(entry.path().filename().string());
    if (!version.has_value()) continue;
    // Per epoch: the size its files name, and the ranks present.
    std::map<uint64_t, std::pair<int, std::set<int>>> epochs;
    std::set<uint64_t> inconsistent;
    std::error_code files_error;
    for (const std::filesystem::directory_entry& file :
         std::filesystem::directory_iterator(entry.path(), files_error)) {
      const std::optional<FileName> name =
          ParseFileName(file.path().filename().string());
      if (!name.has_value()) continue;
      auto& [ranks, present] = epochs[name->epoch];
      if (ranks != 0 && ranks != name->ranks) inconsistent.insert(name->epoch);
      ranks = name->ranks;
      present.insert(name->rank);
    }
    // The newest epoch that wrote it whole (one epoch, one history).
    for (auto it = epochs.rbegin(); it != epochs.rend(); ++it) {
      const auto& [ranks, present] = it->second;
      if (inconsistent.count(it->first) == 0 &&
          static_cast<int>(present.size()) == ranks) {
        out.push_back(WholeVersion{*version, it->first, ranks});
        break;
      }
    }
  }
  std::sort(out.begin(), out.end(),
            [](const WholeVersion& a, const WholeVersion& b) {
              return a.version > b.version;
            });
  return out;
}

int CheckpointFolder::Prune(int keep) const {
  const std::vector<WholeVersion> whole = WholeVersions();
  if (keep < 1 || static_cast<int>(whole.size()) <= keep) return 0;
  const int64_t oldest_kept = whole[keep - 1].version;
  int removed = 0;
  std::error_code error;
  std::filesystem::directory_iterator versions(run_folder_, error);
  if (error) return 0;
  std::vector<std::filesystem::path> old;
  for (const std::filesystem::directory_entry& entry : versions) {
    const std::optional<int64_t> version =
        VersionOf(entry.path().filename().string());
    if (version.has_value() && *version < oldest_kept) {
      old.push_back(entry.path());
    }
  }
  for (const std::filesystem::path& path : old) {
    std::error_code remove_error;
    std::filesystem::remove_all(path, remove_error);
    if (!remove_error) ++removed;
  }
  return removed;
}

CheckpointWriter::CheckpointWriter(NodeMetrics* metrics, int keep)
    : metrics_(metrics), keep_(std::max(1, keep)) {
  thread_ = std::thread([this] { Loop(); });
}

CheckpointWriter::~CheckpointWriter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

bool CheckpointWriter::Submit(CheckpointFolder folder, ShardCheckpoint shard,
                              absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  const absl::Time start = absl::Now();
  const bool room = mu_.AwaitWithDeadline(
      absl::Condition(
          +[](CheckpointWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
            return w->queue_.size() < kMaxQueued;
          },
          this),
      deadline);
  const absl::Duration waited = absl::Now() - start;
  if (waited > absl::ZeroDuration()) {
    metrics_->checkpoint_wait_seconds->Increment(absl::ToDoubleSeconds(waited));
  }
  if (!room) {
    metrics_->checkpoint_failures->Increment();
    STARLING_LOG(WARNING) << "run " << shard.run_id
                          << ": checkpoint of version " << shard.version
                          << " dropped: the writer was still "
                          << "writing " << queue_.size() << " earlier one(s) "
                          << "after " << absl::FormatDuration(waited) << " (is "
                          << folder.run_folder() << " answering?)";
    return false;
  }
  queue_.push_back(Item{std::move(folder), std::move(shard)});
  return true;
}

bool CheckpointWriter::Drain(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(
      absl::Condition(
          +[](CheckpointWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
            return w->queue_.empty() && !w->writing_;
          },
          this),
      deadline);
}

int64_t CheckpointWriter::written_version(uint64_t run_id) const {
  absl::MutexLock lock(&mu_);
  return written_run_ == run_id ? written_version_ : -1;
}

void CheckpointWriter::Loop() {
  while (true) {
    std::optional<Item> item;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CheckpointWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
            return w->stop_ || !w->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, everything written
      item.emplace(std::move(queue_.front()));
      queue_.pop_front();
      writing_ = true;
    }
    const ShardCheckpoint& shard = item->shard;
    const absl::Time start = absl::Now();
    const absl::Status written = item->folder.Write(shard);
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (written.ok()) {
      metrics_->checkpoints_written->Increment();
      metrics_->checkpoint_seconds->Increment(seconds);
      metrics_->checkpoint_bytes->Increment(static_cast<double>(
          (shard.master.size() + shard.state.size()) * sizeof(float)));
      metrics_->checkpoint_version->Set(static_cast<double>(shard.version));
      item->folder.Prune(keep_);
    } else {
      metrics_->checkpoint_failures->Increment();
      STARLING_LOG(WARNING)
          << "run " << shard.run_id << ": checkpoint of version "
          << shard.version << " not written: " << written;
    }
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (written.ok()) {
      written_run_ = shard.run_id;
      written_version_ = shard.version;
    }
  }
}

}  // namespace node
}  // namespace starling
