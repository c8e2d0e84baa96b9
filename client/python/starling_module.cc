// starling._starling: the C++ client (client/client.h) as a Python
// extension module, built by Bazel with pybind11 for Debian's
// /usr/bin/python3. The Python package (starling/, starling/torch/) is
// the user-facing layer; this module stays a thin, typed mirror of
// Client:
//
//   c = _starling.Client(socket_path, worker_index, timeout_s, pool_bytes,
//                        bucket_bytes, worker_name, connect_timeout_s)
//   c.declare_tensor("fc1.weight", [256, 784], "float32")
//   buf = c.allocate(nbytes)           # writable buffer in the shared pool
//   c.push_gradients_part_async(step, [("fc1.weight", ptr, nbytes, 4)])
//   api = c.collective_api()           # capsule for other extension modules
//
// Tensors cross as (name, address, bytes, element bytes) tuples: the address
// of a torch tensor's storage (tensor.data_ptr()) or of a pool buffer. The
// client refuses, with InvalidArgument naming the op and tensor, any range
// that is not inside its pool, so no address from Python is ever written
// outside memory the client owns.
//
// Every blocking call releases the GIL. A non-OK absl::Status becomes
// starling.StarlingError (a RuntimeError) whose message is the status text
// and whose `code` is the status code's name ("INVALID_ARGUMENT", ...).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/python/collective_api.h"
#include "server/base/job_config_checks.h"
#include "server/base/optimizer_names.h"
#include "server/base/version.h"
#include "server/base/worker_socket.h"

namespace py = pybind11;

namespace starling {
namespace client {
namespace {

// starling._starling.StarlingError, created at import.
PyObject* g_error = nullptr;

[[noreturn]] void Raise(const absl::Status& status) {
  py::object error = py::reinterpret_borrow<py::object>(g_error);
  py::object instance = error(std::string(status.message()));
  instance.attr("code") = absl::StatusCodeToString(status.code());
  PyErr_SetObject(g_error, instance.ptr());
  throw py::error_already_set();
}

void Check(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}

template <typename T>
T Check(absl::StatusOr<T> value) {
  if (!value.ok()) Raise(value.status());
  return *std::move(value);
}

// The element types the Python package moves, by torch's name: float32,
// float16 and bfloat16; nullopt for any other.
std::optional<DataType> MovedType(const std::string& dtype) {
  if (dtype == "float32") return DataType::kFloat32;
  if (dtype == "float16") return DataType::kFloat16;
  if (dtype == "bfloat16") return DataType::kBFloat16;
  return std::nullopt;
}

absl::Duration Seconds(double seconds) {
  return seconds < 0 ? absl::InfiniteDuration() : absl::Seconds(seconds);
}

// (name, address, bytes, element bytes) from Python.
using TensorTuple = std::tuple<std::string, uintptr_t, size_t, size_t>;

std::vector<Tensor> ToTensors(const std::vector<TensorTuple>& tuples) {
  std::vector<Tensor> tensors;
  tensors.reserve(tuples.size());
  for (const auto& [name, address, bytes, element_bytes] : tuples) {
    if (element_bytes == sizeof(float)) {
      tensors.emplace_back(name,
                           absl::Span<float>(reinterpret_cast<float*>(address),
                                             bytes / sizeof(float)));
    } else if (element_bytes == sizeof(uint16_t)) {
      tensors.emplace_back(
          name, absl::Span<uint16_t>(reinterpret_cast<uint16_t*>(address),
                                     bytes / sizeof(uint16_t)));
    } else {
      Raise(absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': elements of ", element_bytes,
                       " bytes; Starling moves float32, float16 and "
                       "bfloat16 (4 or 2 bytes)")));
    }
    if (bytes % element_bytes != 0) {
      Raise(absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "': ", bytes, " bytes is not a whole number of ",
          element_bytes, "-byte elements")));
    }
  }
  return tensors;
}

// A writable buffer inside the client's pool. Holds the client alive (the
// pool is unmapped with it) through the Python reference kept by
// py::keep_alive on allocate().
struct PoolBuffer {
  std::byte* data = nullptr;
  size_t bytes = 0;
};

// The Future of an asynchronous op; wait() raises StarlingError. It waits
// as long as its client's blocking operations may (the client's timeout)
// unless told otherwise.
class PyFuture {
 public:
  PyFuture(Future future, absl::Duration default_timeout)
      : future_(std::move(future)), default_timeout_(default_timeout) {}
  bool Poll() const { return future_.Poll(); }
  void Wait(std::optional<double> timeout_s) const {
    const absl::Duration timeout =
        timeout_s.has_value() ? Seconds(*timeout_s) : default_timeout_;
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = future_.Wait(timeout);
    }
    Check(status);
  }

 private:
  Future future_;
  absl::Duration default_timeout_;
};

// Thread-compatible, as Python uses it (under the GIL); the collective
// table (collective_api.h) it hands out is thread-safe.
class PyClient {
 public:
  PyClient(const std::string& socket_path, int worker_index, double timeout_s,
           size_t pool_bytes, size_t bucket_bytes,
           const std::string& worker_name, double connect_timeout_s) {
    api_.version = STARLING_COLLECTIVE_API_VERSION;
    api_.client = this;
    api_.total_workers = &PyClient::ApiTotalWorkers;
    api_.slot = &PyClient::ApiSlot;
    api_.allocate = &PyClient::ApiAllocate;
    api_.start = &PyClient::ApiStart;
    ClientOptions options;
    options.socket_path = socket_path;
    options.worker_index = worker_index;
    options.timeout = Seconds(timeout_s);
    timeout_ = options.timeout;
    options.pool_bytes = pool_bytes;
    options.bucket_bytes = bucket_bytes;
    options.worker_name = worker_name;
    if (connect_timeout_s > 0)
      options.connect_timeout = Seconds(connect_timeout_s);
    absl::StatusOr<std::unique_ptr<Client>> client;
    {
      py::gil_scoped_release release;
      client = Client::Connect(options);
    }
    client_ = Check(std::move(client));
  }

  Client& client() {
    if (client_ == nullptr) {
      Raise(absl::FailedPreconditionError(
          "this Starling client was closed (starling.shutdown())"));
    }
    return *client_;
  }

  // Drops the connection (the daemon frees the worker's index). Waits for
  // calls of the collective table in progress on other threads; later ones
  // fail with FailedPrecondition.
  void Close() {
    py::gil_scoped_release release;
    std::unique_ptr<Client> client;
    {
      absl::MutexLock lock(&api_mutex_);
      client = std::move(client_);
    }
    client.reset();
  }

  // The collective table of this client (collective_api.h); valid while
  // this object lives.
  const StarlingCollectiveApi* collective_api() const { return &api_; }

  PoolBuffer Allocate(size_t bytes) {
    absl::Span<float> floats =
        Check(client().Allocate((bytes + sizeof(float) - 1) / sizeof(float)));
    return PoolBuffer{reinterpret_cast<std::byte*>(floats.data()), bytes};
  }

  py::dict Job() {
    const Client::JobSettings job = client().job();
    py::dict d;
    d["mode"] = job.mode;
    d["optimizer"] = job.optimizer;
    d["learning_rate"] = job.learning_rate;
    d["parameter_count"] = job.parameter_count;
    d["elastic_tau"] = job.elastic_tau;
    d["elastic_alpha"] = job.elastic_alpha;
    d["elastic_momentum"] = job.elastic_momentum;
    d["elastic"] = job.elastic;
    d["staleness"] = client().staleness();
    return d;
  }

  void Declare(const std::string& name, std::vector<int64_t> shape,
               const std::string& dtype) {
    const std::optional<DataType> type = MovedType(dtype);
    if (!type.has_value()) {
      Raise(absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "': dtype ", dtype,
          " cannot be declared; Starling moves float32, float16 and "
          "bfloat16")));
    }
    Check(client().DeclareTensor(name, std::move(shape), *type));
  }

  // Runs `op` without the GIL and raises its error.
  template <typename Op>
  void Blocking(Op op) {
    Client& c = client();
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = op(c);
    }
    Check(status);
  }
  template <typename Op>
  PyFuture Async(Op op) {
    Client& c = client();
    py::gil_scoped_release release;
    return PyFuture(op(c), timeout_);
  }

 private:
  // The functions of api_: `self` is api_.client. Each holds api_mutex_
  // shared while it uses client_, so that Close() cannot destroy the client
  // under it.
  static int ApiTotalWorkers(void* self);
  static int ApiSlot(void* self);
  static void* ApiAllocate(void* self, size_t bytes, char* error,
                           size_t error_bytes);
  static void ApiStart(void* self, int kind, void* data, size_t bytes,
                       int dtype, int op, int root, StarlingDone done,
                       void* arg);

  // Set by the Python thread (constructor, Close) under api_mutex_ held
  // exclusively; read there without it, and by the table's functions on
  // any thread under api_mutex_ held shared.
  std::unique_ptr<Client> client_;
  absl::Duration timeout_;  // ClientOptions::timeout
  absl::Mutex api_mutex_;
  StarlingCollectiveApi api_;
};

void ReportDone(StarlingDone done, void* arg, const absl::Status& status) {
  const std::string message(status.message());
  done(arg, static_cast<int>(status.code()), message.c_str());
}

absl::Status ClosedError() {
  return absl::FailedPreconditionError(
      "this Starling client was closed (starling.shutdown())");
}

int PyClient::ApiTotalWorkers(void* self) {
  PyClient& c = *static_cast<PyClient*>(self);
  absl::ReaderMutexLock lock(&c.api_mutex_);
  return c.client_ == nullptr ? 0 : c.client_->total_workers();
}

int PyClient::ApiSlot(void* self) {
  PyClient& c = *static_cast<PyClient*>(self);
  absl::ReaderMutexLock lock(&c.api_mutex_);
  if (c.client_ == nullptr || c.client_->total_workers() == 0) return -1;
  return c.client_->slot();
}

void* PyClient::ApiAllocate(void* self, size_t bytes, char* error,
                            size_t error_bytes) {
  PyClient& c = *static_cast<PyClient*>(self);
  absl::Status status;
  {
    absl::ReaderMutexLock lock(&c.api_mutex_);
    if (c.client_ == nullptr) {
      status = ClosedError();
    } else {
      const size_t elements =
          std::max<size_t>(1, (bytes + sizeof(float) - 1) / sizeof(float));
      absl::StatusOr<absl::Span<float>> floats = c.client_->Allocate(elements);
      if (floats.ok()) return floats->data();
      status = floats.status();
    }
  }
  if (error != nullptr && error_bytes > 0) {
    const std::string text(status.message());
    const size_t n = std::min(text.size(), error_bytes - 1);
    text.copy(error, n);
    error[n] = '\0';
  }
  return nullptr;
}

void PyClient::ApiStart(void* self, int kind, void* data, size_t bytes,
                        int dtype, int op, int root, StarlingDone done,
                        void* arg) {
  PyClient& c = *static_cast<PyClient*>(self);
  if (dtype < STARLING_FLOAT32 || dtype > STARLING_INT64) {
    ReportDone(done, arg,
               absl::InvalidArgumentError(absl::StrCat(
                   "collective_api: unknown element type ", dtype)));
    return;
  }
  const bool reduces =
      kind == STARLING_ALL_REDUCE || kind == STARLING_REDUCE_SCATTER;
  if (reduces && (op < STARLING_SUM || op > STARLING_PRODUCT)) {
    ReportDone(done, arg,
               absl::InvalidArgumentError(absl::StrCat(
                   "collective_api: unknown reduction operator ", op)));
    return;
  }
  // The enums of collective_api.h follow starling::DataType and ReduceOp.
  const auto type = static_cast<DataType>(dtype);
  const auto reduce_op = static_cast<ReduceOp>(op);
  const absl::Span<std::byte> span(static_cast<std::byte*>(data), bytes);
  // Held shared for the whole call: the barrier blocks in it (up to the
  // client's timeout), which only delays a Close() on another thread.
  absl::ReaderMutexLock lock(&c.api_mutex_);
  if (c.client_ == nullptr) {
    ReportDone(done, arg, ClosedError());
    return;
  }
  Client& client = *c.client_;
  // The table's callers stage into pool memory they refill for every op.
  constexpr CollectiveOptions kScratch{/*scratch=*/true};
  Future future;
  switch (kind) {
    case STARLING_ALL_REDUCE:
      future = client.AllReduceAsync(span, type, reduce_op, kScratch);
      break;
    case STARLING_BROADCAST:
      future = client.BroadcastAsync(span, type, root, kScratch);
      break;
    case STARLING_ALL_GATHER:
      future = client.AllGatherAsync(span, type);
      break;
    case STARLING_REDUCE_SCATTER:
      future = client.ReduceScatterAsync(span, type, reduce_op);
      break;
    case STARLING_BARRIER:
      // The client's barrier is synchronous: done on this thread.
      ReportDone(done, arg, client.Barrier());
      return;
    default:
      ReportDone(done, arg,
                 absl::InvalidArgumentError(absl::StrCat(
                     "collective_api: unknown collective kind ", kind)));
      return;
  }
  future.Then([done, arg](const absl::Status& status) {
    ReportDone(done, arg, status);
  });
}

void DefineModule(py::module_& m) {
  m.doc() =
      "Starling's C++ client (client/client.h) for Python; use the starling "
      "package, not this module.";
  m.attr("__version__") = std::string(starling::kStarlingVersion);
  m.attr("DEFAULT_SOCKET") = std::string(starling::kDefaultWorkerSocket);
  // The modes whose optimizer is the EASGD centre update (the mode table,
  // server/base/job_config_checks.h), for the launcher's default.
  py::list elastic;
  for (const proto::ModeInfo& mode : proto::KnownModes()) {
    if (proto::IsElasticMode(mode.mode)) elastic.append(mode.name);
  }
  m.attr("ELASTIC_MODES") = py::tuple(elastic);
  // The torch optimizer each daemon-side optimizer equals, with the
  // hyper-parameters the daemons use (server/base/optimizer_names.h).
  py::dict daemon;
  daemon["sgd"] = py::dict(py::arg("momentum") = 0.0);
  daemon["momentum"] = py::dict(py::arg("momentum") = kDaemonMomentum);
  daemon["adam"] = py::dict(
      py::arg("betas") = py::make_tuple(kDaemonAdamBeta1, kDaemonAdamBeta2));
  m.attr("DAEMON_OPTIMIZERS") = daemon;
  g_error = PyErr_NewExceptionWithDoc(
      "starling._starling.StarlingError",
      "An error from Starling's client or daemons: the message says what "
      "failed and where (op, tensor, step, worker, daemon rank); `code` is "
      "the status code's name, e.g. 'INVALID_ARGUMENT', 'UNAVAILABLE', "
      "'DEADLINE_EXCEEDED'.",
      PyExc_RuntimeError, nullptr);
  m.add_object("StarlingError", py::handle(g_error));

  py::class_<PoolBuffer>(m, "PoolBuffer", py::buffer_protocol())
      .def_buffer([](PoolBuffer& b) {
        return py::buffer_info(b.data, 1, "B", 1,
                               {static_cast<py::ssize_t>(b.bytes)}, {1});
      })
      .def_property_readonly("address",
                             [](const PoolBuffer& b) {
                               return reinterpret_cast<uintptr_t>(b.data);
                             })
      .def("__len__", [](const PoolBuffer& b) { return b.bytes; });

  py::class_<PyFuture>(m, "Future")
      .def("poll", &PyFuture::Poll, "True once the op finished.")
      .def("wait", &PyFuture::Wait, py::arg("timeout_s") = py::none(),
           "Waits for the op at most timeout_s seconds (None: the client's "
           "timeout, as a blocking op; < 0: as long as it takes); raises "
           "StarlingError if it failed or did not finish in time.");

  py::class_<PyClient>(m, "Client")
      .def(py::init<const std::string&, int, double, size_t, size_t,
                    const std::string&, double>(),
           py::arg("socket_path"), py::arg("worker_index"),
           py::arg("timeout_s"), py::arg("pool_bytes"), py::arg("bucket_bytes"),
           py::arg("worker_name") = "", py::arg("connect_timeout_s") = 0.0)
      .def("close", &PyClient::Close)
      .def(
          "collective_api",
          [](PyClient& c) {
            return py::capsule(c.collective_api(),
                               STARLING_COLLECTIVE_API_CAPSULE);
          },
          "The client's collectives as a capsule "
          "named " STARLING_COLLECTIVE_API_CAPSULE
          " holding a StarlingCollectiveApi* (client/python/collective_api.h) "
          "for other extension modules (the torch.distributed backend); "
          "valid while this Client lives: keep a reference to it.")
      .def_property_readonly("rank",
                             [](PyClient& c) { return c.client().rank(); })
      .def_property_readonly(
          "group_size", [](PyClient& c) { return c.client().group_size(); })
      .def_property_readonly(
          "local_workers",
          [](PyClient& c) { return c.client().local_workers(); })
      .def_property_readonly(
          "total_workers",
          [](PyClient& c) { return c.client().total_workers(); })
      .def_property_readonly(
          "worker_index", [](PyClient& c) { return c.client().worker_index(); })
      .def_property_readonly(
          "daemon_address",
          [](PyClient& c) { return c.client().daemon_address(); })
      .def_property_readonly("run_id",
                             [](PyClient& c) { return c.client().run_id(); })
      .def_property_readonly(
          "first_step", [](PyClient& c) { return c.client().first_step(); })
      .def_property_readonly(
          "last_pulled_version",
          [](PyClient& c) { return c.client().last_pulled_version(); })
      .def("job", &PyClient::Job)
      .def("declare_tensor", &PyClient::Declare, py::arg("name"),
           py::arg("shape"), py::arg("dtype"))
      .def("allocate", &PyClient::Allocate, py::arg("bytes"),
           py::keep_alive<0, 1>(),
           "A zeroed, 64-byte aligned buffer of `bytes` in the shared pool "
           "(lives as long as the client).")
      .def(
          "set_initial_parameters",
          [](PyClient& c, const std::vector<TensorTuple>& values) {
            std::vector<Tensor> tensors = ToTensors(values);
            c.Blocking([&](Client& client) {
              return client.SetInitialParameters(tensors);
            });
          },
          py::arg("values"),
          "The run's initial parameters from this worker: every worker "
          "that sets them must set the same, bit for bit.")
      .def(
          "offer_initial_parameters",
          [](PyClient& c, const std::vector<TensorTuple>& values) {
            std::vector<Tensor> tensors = ToTensors(values);
            c.Blocking([&](Client& client) {
              return client.OfferInitialParameters(tensors);
            });
          },
          py::arg("values"),
          "Offers initial parameters: the run takes the first offer in "
          "(rank, worker) order, as a broadcast from rank 0, unless some "
          "worker set them.")
      .def(
          "push_gradients",
          [](PyClient& c, int64_t step, const std::vector<TensorTuple>& g) {
            std::vector<Tensor> tensors = ToTensors(g);
            c.Blocking([&](Client& client) {
              return client.PushGradients(step, tensors);
            });
          },
          py::arg("step"), py::arg("gradients"))
      .def(
          "push_gradients_async",
          [](PyClient& c, int64_t step, const std::vector<TensorTuple>& g) {
            std::vector<Tensor> tensors = ToTensors(g);
            return c.Async([&](Client& client) {
              return client.PushGradientsAsync(step, tensors);
            });
          },
          py::arg("step"), py::arg("gradients"))
      .def(
          "push_gradients_part_async",
          [](PyClient& c, int64_t step, const std::vector<TensorTuple>& g) {
            std::vector<Tensor> tensors = ToTensors(g);
            return c.Async([&](Client& client) {
              return client.PushGradientsPartAsync(step, tensors);
            });
          },
          py::arg("step"), py::arg("gradients"))
      .def(
          "pull_parameters",
          [](PyClient& c, int64_t version, const std::vector<TensorTuple>& p) {
            std::vector<Tensor> tensors = ToTensors(p);
            c.Blocking([&](Client& client) {
              return client.PullParameters(version, tensors);
            });
          },
          py::arg("version"), py::arg("parameters"))
      .def(
          "pull_parameters_async",
          [](PyClient& c, int64_t version, const std::vector<TensorTuple>& p) {
            std::vector<Tensor> tensors = ToTensors(p);
            return c.Async([&](Client& client) {
              return client.PullParametersAsync(version, tensors);
            });
          },
          py::arg("version"), py::arg("parameters"))
      .def(
          "all_reduce_async",
          [](PyClient& c, uintptr_t address, size_t elements,
             const std::string& dtype) {
            const std::optional<DataType> type = MovedType(dtype);
            if (!type.has_value()) {
              Raise(absl::InvalidArgumentError(
                  absl::StrCat("all_reduce_async: dtype ", dtype,
                               " is not float32, float16 or bfloat16")));
            }
            absl::Span<std::byte> data(reinterpret_cast<std::byte*>(address),
                                       elements * DataTypeBytes(*type));
            return c.Async([&](Client& client) {
              return client.AllReduceAsync(data, *type, ReduceOp::kSum);
            });
          },
          py::arg("address"), py::arg("elements"), py::arg("dtype") = "float32",
          "Sums `elements` of `dtype` (float32, float16 or bfloat16) at "
          "`address` (inside the pool) over every worker, in place.")
      .def(
          "report_step_times",
          [](PyClient& c, double compute_s, double step_s) {
            c.client().ReportStepTimes(absl::Seconds(compute_s),
                                       absl::Seconds(step_s));
          },
          py::arg("compute_s"), py::arg("step_s"))
      .def(
          "report_progress",
          [](PyClient& c, int64_t samples, std::optional<double> loss,
             std::optional<double> accuracy) {
            Check(c.client().ReportProgress(samples, loss, accuracy));
          },
          py::arg("samples"), py::arg("loss") = py::none(),
          py::arg("accuracy") = py::none(),
          "Samples trained since the last report and the latest loss and "
          "accuracy (0..1), sent with the next push for the daemon's "
          "metrics. Raises StarlingError (code INVALID_ARGUMENT) for "
          "negative samples or an "
          "accuracy outside 0..1 (NaN included).")
      .def(
          "rejoin",
          [](PyClient& c) {
            Client& client = c.client();
            absl::StatusOr<Client::Rejoined> rejoined;
            {
              py::gil_scoped_release release;
              rejoined = client.Rejoin();
            }
            const Client::Rejoined r = Check(std::move(rejoined));
            py::dict d;
            d["run_id"] = r.run_id;
            d["next_step"] = r.next_step;
            d["last_pushed"] = r.last_pushed;
            d["rolled_back"] = r.rolled_back;
            return d;
          },
          "After an op failed because the daemons' group re-formed around a "
          "lost daemon: reconnects (the pool and every buffer stay valid), "
          "declares the run's tensors again and returns where the run goes "
          "on: {run_id, next_step (pull that version, then push it), "
          "last_pushed, rolled_back (pushed steps to push again)}. Raises "
          "StarlingError FAILED_PRECONDITION when the run did not go on.")
      .def_property_readonly(
          "rolled_back_steps",
          [](PyClient& c) { return c.client().rolled_back_steps(); })
      .def("barrier",
           [](PyClient& c) {
             c.Blocking([](Client& client) { return client.Barrier(); });
           })
      .def("finish", [](PyClient& c) {
        c.Blocking([](Client& client) { return client.Finish(); });
      });
}

}  // namespace
}  // namespace client
}  // namespace starling

PYBIND11_MODULE(_starling, m) { starling::client::DefineModule(m); }
