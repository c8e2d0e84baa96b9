// The fabric path over libfabric's tcp provider on 127.0.0.1, as providers
// report their rules and (verbs_style) as verbs requires them: exact bytes
// and notices for every size around the slot, writes larger than every
// slot together (credits), early arrivals, lost peers, per-peer choice and
// no registration per op.
#include "server/transport/fabric/fabric_path.h"

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/transport/completion.h"
#include "server/transport/fabric/fabric_connect.h"
#include "server/transport/fabric/fabric_test_util.h"
#include "server/transport/inbox.h"
#include "server/transport/shm/shm_path.h"
#include "server/transport/tcp/tcp_test_util.h"
#include "server/transport/write_path.h"

namespace starling {
namespace transport {
namespace fabric {
namespace {

using ::testing::HasSubstr;

std::byte Pattern(int writer, int reader, size_t k, size_t i) {
  return static_cast<std::byte>(
      (writer * 131 + reader * 31 + k * 7 + i * 13 + (i >> 9)) & 0xff);
}

absl::Time Soon() { return absl::Now() + absl::Seconds(20); }

class FabricPathTest : public ::testing::TestWithParam<PathKind> {};

TEST_P(FabricPathTest, EveryPairWritesEverySizeAroundTheSlotExactly) {
  constexpr int kRanks = 3;
  const bool shm =
      GetParam() == PathKind::kShm || GetParam() == PathKind::kShmRingsOnly;
  ASSERT_OK_AND_ASSIGN(FabricGroup group, CreatePathGroup(kRanks, GetParam()));
  const size_t payload = TestFabricOptions().slot_bytes - kSlotHeaderBytes;
  // 17 parts for the largest: more than the 4 slots a peer has.
  const std::vector<size_t> sizes = {
      0, 1, payload - 1, payload, payload + 1, 3 * payload + 7, (1 << 20) + 13};
  std::vector<uint64_t> registered;
  for (const FabricRoutes& routes : group.routes) {
    ASSERT_NE(shm ? static_cast<const PeerPath*>(routes.shm_path) : routes.path,
              nullptr);
    if (!shm) registered.push_back(routes.path->registrations());
    for (const FabricRoute& route : routes.peers) {
      EXPECT_NE(route.transport, "tcp") << route.why;
      EXPECT_THAT(route.why, HasSubstr(shm ? "shm" : "fabric (tcp"));
    }
  }
  // regions[reader][writer][k], each with a margin that must stay zero.
  constexpr size_t kMargin = 64;
  std::vector<std::vector<std::vector<std::vector<std::byte>>>> regions(
      kRanks, std::vector<std::vector<std::vector<std::byte>>>(kRanks));
  for (int r = 0; r < kRanks; ++r) {
    for (int w = 0; w < kRanks; ++w) {
      if (w == r) continue;
      for (size_t k = 0; k < sizes.size(); ++k) {
        regions[r][w].emplace_back(sizes[k] + 2 * kMargin);
        ASSERT_OK(group.transports[r]->RegisterRegion(
            1000 * w + k, absl::MakeSpan(regions[r][w][k])));
      }
    }
  }
  std::vector<std::vector<std::vector<std::byte>>> sources(kRanks);
  std::vector<std::thread> threads;
  for (int w = 0; w < kRanks; ++w) {
    threads.emplace_back([&, w] {
      Completion done;
      std::vector<std::vector<std::byte>> data;
      for (int r = 0; r < kRanks; ++r) {
        for (size_t k = 0; k < sizes.size(); ++k) {
          std::vector<std::byte> bytes(sizes[k]);
          for (size_t i = 0; i < bytes.size(); ++i) {
            bytes[i] = Pattern(w, r, k, i);
          }
          data.push_back(std::move(bytes));
        }
      }
      size_t at = 0;
      for (int r = 0; r < kRanks; ++r) {
        for (size_t k = 0; k < sizes.size(); ++k, ++at) {
          if (r == w) continue;
          group.transports[w]->Write(r, data[at], 1000 * w + k, kMargin,
                                     static_cast<uint32_t>(k), &done);
        }
      }
      EXPECT_OK(done.Wait(Soon()));
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    for (int w = 0; w < kRanks; ++w) {
      if (w == r) continue;
      for (size_t k = 0; k < sizes.size(); ++k) {
        WriteMatch match;
        match.region = 1000 * w + k;
        match.peer = w;
        ASSERT_OK_AND_ASSIGN(WriteNotice notice,
                             group.transports[r]->WaitForWrite(match, Soon()));
        EXPECT_EQ(notice.imm, k);
        EXPECT_EQ(notice.offset_bytes, kMargin);
        EXPECT_EQ(notice.length_bytes, sizes[k]);
        const std::vector<std::byte>& got = regions[r][w][k];
        for (size_t i = 0; i < got.size(); ++i) {
          const bool inside = i >= kMargin && i < kMargin + sizes[k];
          const std::byte want =
              inside ? Pattern(w, r, k, i - kMargin) : std::byte{0};
          ASSERT_EQ(got[i], want) << "reader " << r << " writer " << w
                                  << " size " << sizes[k] << " byte " << i;
        }
      }
    }
  }
  if (shm) {
    // A ring is no slot: every write is one frame, the rings 64 KiB. With
    // single copy every peer reads large writes from the writer's memory.
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_EQ(group.transports[r]->PathName((r + 1) % kRanks, "tcp"), "shm");
      EXPECT_EQ(group.routes[r].shm_path->single_copy_peers(),
                GetParam() == PathKind::kShm ? kRanks - 1 : 0);
    }
    return;
  }
  // Each write is cut into slots' worth of parts (at least one).
  uint64_t parts = 0;
  for (size_t size : sizes) {
    parts += std::max<uint64_t>(1, (size + payload - 1) / payload);
  }
  for (int r = 0; r < kRanks; ++r) {
    // Registered once, at open: none per write.
    EXPECT_EQ(group.routes[r].path->registrations(), registered[r]);
    EXPECT_EQ(group.routes[r].path->parts_written(), parts * (kRanks - 1));
    EXPECT_THAT(group.transports[r]->PathName((r + 1) % kRanks, "tcp"),
                HasSubstr("fabric"));
  }
}

TEST_P(FabricPathTest, AWriteBeforeItsRegionIsHeldAndLandsAtRegistration) {
  ASSERT_OK_AND_ASSIGN(FabricGroup group, CreatePathGroup(2, GetParam()));
  std::vector<std::byte> data(300000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = Pattern(1, 0, 0, i);
  Completion done;
  group.transports[1]->Write(0, data, 7, 0, 3, &done);
  ASSERT_OK(done.Wait(Soon()));
  std::vector<std::byte> region(data.size());
  ASSERT_OK(group.transports[0]->RegisterRegion(7, absl::MakeSpan(region)));
  WriteMatch match;
  match.region = 7;
  ASSERT_OK_AND_ASSIGN(WriteNotice notice,
                       group.transports[0]->WaitForWrite(match, Soon()));
  EXPECT_EQ(notice.peer, 1);
  EXPECT_EQ(notice.imm, 3u);
  EXPECT_EQ(region, data);
}

TEST_P(FabricPathTest, AWritePastTheRegionFailsThePeerNamingIt) {
  ASSERT_OK_AND_ASSIGN(FabricGroup group, CreatePathGroup(2, GetParam()));
  std::vector<std::byte> region(100);
  ASSERT_OK(group.transports[0]->RegisterRegion(9, absl::MakeSpan(region)));
  std::vector<std::byte> data(200);
  Completion done;
  group.transports[1]->Write(0, data, 9, 0, 0, &done);
  WriteMatch match;
  match.region = 9;
  absl::StatusOr<WriteNotice> notice =
      group.transports[0]->WaitForWrite(match, Soon());
  ASSERT_FALSE(notice.ok());
  EXPECT_EQ(notice.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(notice.status().message(), HasSubstr("rank 1"));
  // The write itself ends (its bytes left the writer's buffer before or
  // after the receiver refused them).
  EXPECT_FALSE(absl::IsDeadlineExceeded(done.Wait(Soon())));
  // The writer learns it too, over the stream.
  WriteMatch none;
  none.region = 1;
  none.peer = 0;
  EXPECT_FALSE(group.transports[1]->WaitForWrite(none, Soon()).ok());
}

TEST_P(FabricPathTest, AnAbortedPeerFailsWritesAndWaitsWithItsReason) {
  ASSERT_OK_AND_ASSIGN(FabricGroup group, CreatePathGroup(3, GetParam()));
  group.transports[0]->AbortPeer(1, absl::DeadlineExceededError("rank 1 late"));
  std::vector<std::byte> data(1 << 20);
  Completion done;
  group.transports[0]->Write(1, data, 1, 0, 0, &done);
  EXPECT_THAT(done.Wait(Soon()).message(), HasSubstr("rank 1 late"));
  WriteMatch match;
  match.region = 1;
  match.peer = 1;
  EXPECT_THAT(
      group.transports[0]->WaitForWrite(match, Soon()).status().message(),
      HasSubstr("rank 1 late"));
  // Rank 2 is unaffected.
  std::vector<std::byte> region(data.size());
  ASSERT_OK(group.transports[2]->RegisterRegion(1, absl::MakeSpan(region)));
  Completion to_two;
  group.transports[0]->Write(2, data, 1, 0, 0, &to_two);
  ASSERT_OK(to_two.Wait(Soon()));
  match.peer = 0;
  ASSERT_OK(group.transports[2]->WaitForWrite(match, Soon()).status());
}

INSTANTIATE_TEST_SUITE_P(
    EveryPath, FabricPathTest,
    ::testing::Values(PathKind::kAsReported, PathKind::kVerbsStyle,
                      PathKind::kShm, PathKind::kShmRingsOnly),
    [](const auto& info) { return PathKindName(info.param); });

TEST(FabricConnect, APeerWithoutTheFabricGetsTcpAndIsNamed) {
  ASSERT_OK_AND_ASSIGN(
      FabricGroup group,
      CreateFabricGroup(3, false,
                        {FabricUse::kAuto, FabricUse::kOff, FabricUse::kAuto}));
  ASSERT_EQ(group.routes[0].peers.size(), 2u);
  EXPECT_EQ(group.routes[0].peers[0].transport, "tcp");
  EXPECT_THAT(group.routes[0].peers[0].why,
              HasSubstr("tcp: fabric: rank 1 (127.0.0.1:"));
  EXPECT_THAT(group.routes[0].peers[0].why,
              HasSubstr("has none: the fabric is off here"));
  EXPECT_EQ(group.routes[0].peers[1].transport, "fabric (tcp;ofi_rxm)");
  EXPECT_EQ(group.routes[1].path, nullptr);
  EXPECT_EQ(group.transports[0]->PathName(1, "tcp"), "tcp");
  EXPECT_THAT(group.transports[0]->PathName(2, "tcp"), HasSubstr("fabric"));
  // Writes go both ways on both kinds of pair.
  for (int w : {0, 1, 2}) {
    for (int r : {0, 1, 2}) {
      if (w == r) continue;
      std::vector<std::byte> data(200000, static_cast<std::byte>(w * 3 + r));
      std::vector<std::byte> region(data.size());
      ASSERT_OK(
          group.transports[r]->RegisterRegion(50 + w, absl::MakeSpan(region)));
      Completion done;
      group.transports[w]->Write(r, data, 50 + w, 0, 0, &done);
      ASSERT_OK(done.Wait(Soon()));
      WriteMatch match;
      match.region = 50 + w;
      ASSERT_OK(group.transports[r]->WaitForWrite(match, Soon()).status());
      EXPECT_EQ(region, data) << w << " -> " << r;
      ASSERT_OK(group.transports[r]->DeregisterRegion(50 + w));
    }
  }
}

TEST(FabricConnect, RequiredWithAPeerWithoutItIsAnErrorNamingThePeer) {
  absl::StatusOr<FabricGroup> group =
      CreateFabricGroup(2, false, {FabricUse::kRequired, FabricUse::kOff});
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(group.status().message(), HasSubstr("rank 1 (127.0.0.1:"));
  EXPECT_THAT(group.status().message(), HasSubstr("the fabric is off here"));
}

// A process that holds an earlier group's HELLO (its keys and slot
// addresses) but is no member of the new group: the provider drops its
// writes (the tcp provider without telling the writer), nothing lands and
// no notice appears, and the group goes on. ofi_rxm over tcp gives both
// groups the same keys, so only the new slots' random addresses stand
// between the old HELLO and them (the allocator's reused address let such
// a write land).
TEST(FabricPath, AKeyOfAnEarlierGroupLandsNothing) {
  FabricHello old_hello;
  {
    ASSERT_OK_AND_ASSIGN(FabricGroup earlier, CreateFabricGroup(2, false));
    old_hello = earlier.routes[0].path->HelloFor(1);
  }
  ASSERT_OK_AND_ASSIGN(FabricGroup group, CreateFabricGroup(2, false));
  std::vector<std::byte> region(1 << 16);
  ASSERT_OK(group.transports[0]->RegisterRegion(3, absl::MakeSpan(region)));

  // The stranger: rank 1 of a group of 2 of its own, aimed at rank 0's new
  // endpoint with the old keys and slot addresses.
  auto name = [](int r) { return absl::StrCat("stranger's rank ", r); };
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FabricPath> stranger,
                       FabricPath::Open(TestFabricOptions(), 1, 2, name));
  FabricHello forged = old_hello;
  forged.text = group.routes[0].path->HelloFor(1).text;  // the new address
  ASSERT_OK(stranger->Connect(0, forged));
  Inbox::Options inbox_options;
  inbox_options.rank = 1;
  inbox_options.size = 2;
  inbox_options.name = name;
  Inbox inbox(inbox_options);
  absl::Mutex mu;
  absl::Status refused;
  stranger->Attach(
      WritePath::Sink{&inbox, [&](int peer, const absl::Status& why) {
                        absl::MutexLock lock(&mu);
                        if (refused.ok()) refused = why;
                        (void)peer;
                      }});
  std::vector<std::byte> data(1000, std::byte{0x5a});
  Completion done;
  done.Add(1);
  stranger->PostWrite(0, data, 3, 0, 0, &done);
  ASSERT_OK(done.Wait(Soon()));  // copied into its slot and posted
  // The members still write to each other; theirs is the only notice.
  std::vector<std::byte> member(100, std::byte{1});
  Completion sent;
  group.transports[1]->Write(0, member, 3, 0, 9, &sent);
  ASSERT_OK(sent.Wait(Soon()));
  WriteMatch match;
  match.region = 3;
  ASSERT_OK_AND_ASSIGN(WriteNotice notice,
                       group.transports[0]->WaitForWrite(match, Soon()));
  EXPECT_EQ(notice.peer, 1);
  EXPECT_EQ(notice.imm, 9u);
  // A bounded look for a second notice (the stranger's): there is none.
  EXPECT_EQ(group.transports[0]
                ->WaitForWrite(match, absl::Now() + absl::Seconds(1))
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  stranger->Stop();
  for (size_t i = 0; i < region.size(); ++i) {
    ASSERT_EQ(region[i], i < member.size() ? std::byte{1} : std::byte{0})
        << "byte " << i;
  }
  absl::MutexLock lock(&mu);
  if (!refused.ok()) {
    EXPECT_THAT(refused.message(), HasSubstr("fabric write to"));
  }
}

// Shared memory with the peers of this host (the same host id), the fabric
// with the other, and both carry exact bytes.
TEST(FabricConnect, PeersOfThisHostShareMemoryTheOthersTakeTheFabric) {
  ASSERT_OK_AND_ASSIGN(auto transports, tcp::CreateGroup(3));
  const std::vector<std::string> hosts = {"h1", "h1", "h2"};
  std::vector<absl::StatusOr<FabricRoutes>> results(
      3, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      ConnectOptions connect;
      connect.fabric = FabricUse::kAuto;
      connect.providers = {"tcp"};
      connect.fabric_options = TestFabricOptions();
      connect.shm = FabricUse::kAuto;
      connect.host_id = hosts[r];
      results[r] = ConnectFabric(transports[r].get(), connect, Soon());
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) ASSERT_OK(results[r].status()) << r;
  EXPECT_EQ(results[0]->peers[0].transport, "shm");
  EXPECT_EQ(results[0]->peers[1].transport, "fabric (tcp;ofi_rxm)");
  EXPECT_EQ(results[1]->peers[0].transport, "shm");
  EXPECT_EQ(results[2]->peers[0].transport, "fabric (tcp;ofi_rxm)");
  EXPECT_EQ(transports[0]->PathName(1, "tcp"), "shm");
  for (int w = 0; w < 3; ++w) {
    for (int r = 0; r < 3; ++r) {
      if (w == r) continue;
      std::vector<std::byte> data(300001);
      for (size_t i = 0; i < data.size(); ++i) data[i] = Pattern(w, r, 1, i);
      std::vector<std::byte> region(data.size());
      ASSERT_OK(transports[r]->RegisterRegion(60 + w, absl::MakeSpan(region)));
      Completion done;
      transports[w]->Write(r, data, 60 + w, 0, 4, &done);
      ASSERT_OK(done.Wait(Soon()));
      WriteMatch match;
      match.region = 60 + w;
      ASSERT_OK(transports[r]->WaitForWrite(match, Soon()).status());
      EXPECT_EQ(region, data) << w << " -> " << r;
      ASSERT_OK(transports[r]->DeregisterRegion(60 + w));
    }
  }
}

TEST(FabricConnect, RequiredSharedMemoryWithAPeerElsewhereNamesIt) {
  ASSERT_OK_AND_ASSIGN(auto transports, tcp::CreateGroup(2));
  std::vector<absl::StatusOr<FabricRoutes>> results(
      2, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      ConnectOptions connect;
      connect.fabric = FabricUse::kOff;
      connect.shm = FabricUse::kRequired;
      connect.host_id = r == 0 ? "h1" : "h2";
      results[r] = ConnectFabric(transports[r].get(), connect, Soon());
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_FALSE(results[0].ok());
  EXPECT_EQ(results[0].status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(results[0].status().message(), HasSubstr("rank 1 (127.0.0.1:"));
  EXPECT_THAT(results[0].status().message(),
              HasSubstr("is on another host (h2)"));
}

// Nothing of a group's shared memory stays in /dev/shm once its members
// have mapped each other's segments, even while they run (so a kill -9
// later leaves nothing behind).
TEST(ShmPath, SegmentNamesAreGoneOnceMapped) {
  ASSERT_OK_AND_ASSIGN(FabricGroup group, CreatePathGroup(3, PathKind::kShm));
  std::vector<std::string> names;
  for (const FabricRoutes& routes : group.routes) {
    ASSERT_NE(routes.shm_path, nullptr);
    names.push_back(routes.shm_path->segment_name());
    EXPECT_THAT(names.back(), ::testing::StartsWith(
                                  absl::StrCat("/starling-shm-", getpid())));
  }
  // Each path's thread removes its name once it sees every peer mapped.
  const absl::Time deadline = Soon();
  for (const std::string& name : names) {
    while (access(absl::StrCat("/dev/shm", name).c_str(), F_OK) == 0 &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_NE(access(absl::StrCat("/dev/shm", name).c_str(), F_OK), 0)
        << name << " is still in /dev/shm";
  }
  // And the group still writes.
  std::vector<std::byte> region(70001);
  ASSERT_OK(group.transports[2]->RegisterRegion(5, absl::MakeSpan(region)));
  std::vector<std::byte> data(region.size(), std::byte{0x5a});
  Completion done;
  group.transports[0]->Write(2, data, 5, 0, 1, &done);
  ASSERT_OK(done.Wait(Soon()));
  WriteMatch match;
  match.region = 5;
  ASSERT_OK(group.transports[2]->WaitForWrite(match, Soon()).status());
  EXPECT_EQ(region, data);
}

TEST(ShmPath, AHelloThatIsNotASegmentIsRefused) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<shm::ShmPath> path,
                       shm::ShmPath::Open({}, 0, 2, [](int r) {
                         return absl::StrCat("rank ", r);
                       }));
  FabricHello hello = path->HelloFor(1);
  hello.rank = 1;
  FabricHello other = hello;
  other.provider = "tcp";
  absl::Status refused = path->Connect(1, other);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("rank 1 offered shared memory"));
  other = hello;
  other.text = "/../etc/passwd";
  EXPECT_THAT(path->Connect(1, other).message(),
              HasSubstr("not a Starling segment"));
  other.text = "/starling-shm-1-../../x";
  EXPECT_FALSE(path->Connect(1, other).ok());
  EXPECT_OK(path->Connect(1, hello));
  shm::ShmPathOptions tiny;
  tiny.ring_bytes = 4096;
  EXPECT_THAT(
      shm::ShmPath::Open(tiny, 0, 2, [](int r) { return absl::StrCat(r); })
          .status()
          .message(),
      HasSubstr("is not between 64 KiB and 1 GiB"));
}

TEST(FabricPath, AProviderThatIsNotHereIsNamed) {
  FabricOptions options = TestFabricOptions();
  options.provider = "verbs";
  absl::StatusOr<std::unique_ptr<FabricPath>> path = FabricPath::Open(
      options, 0, 2, [](int r) { return absl::StrCat("rank ", r); });
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(path.status().message(),
              HasSubstr("fi_getinfo(verbs) found none for 127.0.0.1"));
}

}  // namespace
}  // namespace fabric
}  // namespace transport
}  // namespace starling
