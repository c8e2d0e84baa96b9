#include "server/transport/peer_address.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace starling {
namespace transport {

std::string PeerAddress::ToString() const {
  // IPv6 literals need brackets to keep the port readable.
  if (host.find(':') != std::string::npos) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

namespace {

absl::Status EntryError(size_t index, absl::string_view entry,
                        absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("peer list entry ", index, " (\"", entry, "\"): ", what));
}

}  // namespace

absl::StatusOr<std::vector<PeerAddress>> ParsePeerList(absl::string_view list,
                                                       int base_port) {
  if (absl::StripAsciiWhitespace(list).empty()) {
    return absl::InvalidArgumentError("peer list is empty");
  }
  std::vector<PeerAddress> peers;
  absl::flat_hash_map<std::string, size_t> seen;
  const std::vector<absl::string_view> entries = absl::StrSplit(list, ',');
  for (size_t i = 0; i < entries.size(); ++i) {
    const absl::string_view entry = absl::StripAsciiWhitespace(entries[i]);
    if (entry.empty()) return EntryError(i, entry, "empty entry");
    absl::string_view host = entry;
    absl::string_view port_text;
    if (entry.front() == '[') {  // [v6]:port or [v6]
      const size_t close = entry.find(']');
      if (close == absl::string_view::npos) {
        return EntryError(i, entry, "missing ']' after IPv6 address");
      }
      host = entry.substr(1, close - 1);
      absl::string_view rest = entry.substr(close + 1);
      if (!rest.empty()) {
        if (rest.front() != ':') {
          return EntryError(i, entry, "expected ':port' after ']'");
        }
        port_text = rest.substr(1);
        if (port_text.empty()) return EntryError(i, entry, "empty port");
      }
    } else {
      const size_t colon = entry.rfind(':');
      if (colon != absl::string_view::npos) {
        if (entry.find(':') != colon) {
          return EntryError(i, entry, "IPv6 addresses need [brackets]");
        }
        host = entry.substr(0, colon);
        port_text = entry.substr(colon + 1);
        if (port_text.empty()) return EntryError(i, entry, "empty port");
      }
    }
    if (host.empty()) return EntryError(i, entry, "missing host");
    int64_t port = 0;
    if (!port_text.empty()) {
      if (!absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535) {
        return EntryError(i, entry,
                          absl::StrCat("port \"", port_text,
                                       "\" is not a number in 1..65535"));
      }
    } else {
      port = static_cast<int64_t>(base_port) + static_cast<int64_t>(i);
      if (port < 1 || port > 65535) {
        return EntryError(i, entry,
                          absl::StrCat("base port ", base_port, " + index ", i,
                                       " = ", port, " is not in 1..65535"));
      }
    }
    PeerAddress address{std::string(host), static_cast<uint16_t>(port)};
    const std::string key = address.ToString();
    auto [it, inserted] = seen.emplace(key, i);
    if (!inserted) {
      return EntryError(
          i, entry,
          absl::StrCat("address ", key, " is already listed as entry ",
                       it->second));
    }
    peers.push_back(std::move(address));
  }
  return peers;
}

}  // namespace transport
}  // namespace starling
