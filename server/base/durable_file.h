// Durable files: whole-file writes that survive a crash at any point, and
// the SHA-256 their readers check them with.
//
// WriteFileDurably writes PATH.tmp, fsyncs it, renames it over PATH and
// fsyncs the folder (the rename itself durable): a reader finds the
// previous file or the new one, whole, never a mix. The coordinator's state
// file and the daemons' checkpoints are written so.
//
// Thread-compatible: one writer per path at a time.
#ifndef STARLING_SERVER_BASE_DURABLE_FILE_H_
#define STARLING_SERVER_BASE_DURABLE_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace starling {

// The 32-byte SHA-256 digest of `bytes` (OpenSSL's libcrypto).
std::string Sha256(absl::string_view bytes);

// Replaces PATH with `bytes` (see above). The errno's code, naming the file
// and the call, when a step fails; PATH then still holds what it held.
absl::Status WriteFileDurably(const std::string& path, absl::string_view bytes);

// The whole of PATH. NotFound when it does not exist; the errno's code,
// naming `what` and the file, when it cannot be read.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          absl::string_view what);

// The folder holding `path` ("." for a bare name).
std::string FolderOf(const std::string& path);

}  // namespace starling

#endif  // STARLING_SERVER_BASE_DURABLE_FILE_H_
