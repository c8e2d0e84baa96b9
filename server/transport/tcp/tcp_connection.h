// TcpConnection: one TCP socket of the mesh, as the ByteChannel and
// ByteSource the frame sender and receiver run on, plus its epoll interest.
// Internal to TcpTransport.
//
// Thread-safe as used: WriteSome/WantWritable/Shutdown run under the
// sender's lock (any thread), ReadSome and Close on the event loop thread.
#ifndef STARLING_SERVER_TRANSPORT_TCP_TCP_CONNECTION_H_
#define STARLING_SERVER_TRANSPORT_TCP_TCP_CONNECTION_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/transport/frame_receiver.h"
#include "server/transport/frame_sender.h"

namespace starling {
namespace transport {
namespace tcp {

class TcpConnection : public ByteChannel, public ByteSource {
 public:
  // Takes `fd` (non-blocking, connected); adds it to `epoll_fd` for reading.
  TcpConnection(int fd, int epoll_fd, int peer, int index, std::string name);
  TcpConnection(const TcpConnection&) = delete;
  TcpConnection& operator=(const TcpConnection&) = delete;
  ~TcpConnection() override;

  absl::StatusOr<size_t> WriteSome(const struct iovec* iov, int count) override;
  void WantWritable(bool want) override;
  void Shutdown(bool graceful) override;
  absl::StatusOr<size_t> ReadSome(const struct iovec* iov, int count) override;

  // Starts or stops reading (backpressure while a write waits for its
  // region).
  void SetReading(bool reading);

  // Removes the socket from epoll and closes it; later calls do nothing.
  // Returns true if this call closed it. Loop thread only.
  bool Close();
  bool closed() const;

  // Reads and discards what is available; false at end of stream or error
  // (then Close()). For connections of a failed peer.
  bool Drain();

  int peer() const { return peer_; }
  int index() const { return index_; }

  // Set once the peer failed; the loop then only drains and closes.
  std::atomic<bool> dead{false};  // release by FailPeer, acquire by the loop

  // Wired up by the transport right after construction.
  std::unique_ptr<FrameSender> sender;
  std::unique_ptr<FrameReceiver> receiver;

 private:
  void UpdateInterest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int epoll_fd_;
  const int peer_;
  const int index_;
  const std::string name_;

  mutable absl::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_);
  bool reading_ ABSL_GUARDED_BY(mu_) = true;
  bool writable_wanted_ ABSL_GUARDED_BY(mu_) = false;
  unsigned interest_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tcp
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_TCP_TCP_CONNECTION_H_
