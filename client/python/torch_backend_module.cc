// starling.torch._backend: torch.distributed's "starling" backend as a
// Python extension module, built by Bazel for Debian's /usr/bin/python3
// and PyTorch. starling/torch/distributed.py registers it; users call
// torch.distributed.init_process_group("starling").
//
//   executor = _backend.Executor(session.client, timeout_s)   # one a process
//   pg = _backend.ProcessGroupStarling(executor, rank, size, timeout_s)
//
// This module does not link the client: it reaches the process's one
// client (in starling/_starling.so) through the collective table that
// Client.collective_api() hands out (collective_api.h). The Executor keeps
// that Python Client object alive, and every process group keeps its
// Executor.
//
// Blocking calls release the GIL; C++ errors become RuntimeError.
#include <Python.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/python/collective_api.h"
#include "client/python/collective_executor.h"
#include "client/python/process_group_starling.h"

namespace py = pybind11;

namespace starling {
namespace torch_backend {
namespace {

// The Client object's reference, dropped under the GIL from whichever
// thread lets go of the executor last; left alone once the interpreter is
// finalizing (taking the GIL then would end the thread).
void ReleaseWithGil(void* object) {
  if (!Py_IsInitialized() || _Py_IsFinalizing()) return;
  py::gil_scoped_acquire gil;
  Py_DECREF(static_cast<PyObject*>(object));
}

std::shared_ptr<CollectiveExecutor> MakeExecutor(py::object client,
                                                 double timeout_s) {
  py::object capsule = client.attr("collective_api")();
  void* pointer =
      PyCapsule_GetPointer(capsule.ptr(), STARLING_COLLECTIVE_API_CAPSULE);
  if (pointer == nullptr) throw py::error_already_set();
  const auto* api = static_cast<const StarlingCollectiveApi*>(pointer);
  if (api->version != STARLING_COLLECTIVE_API_VERSION) {
    throw std::runtime_error(absl::StrCat(
        "starling.torch._backend: starling._starling's collective table is "
        "version ",
        api->version, ", this module needs ", STARLING_COLLECTIVE_API_VERSION,
        "; rebuild both (bazel build //client/python:starling)"));
  }
  CollectiveExecutor::Options options;
  // The client fails an op after its timeout, naming who did not answer;
  // the executor's own bound comes 2 s later, for a client that cannot.
  options.collective_timeout =
      timeout_s < 0 || !std::isfinite(timeout_s)
          ? absl::InfiniteDuration()
          : absl::Seconds(timeout_s) + absl::Seconds(2);
  std::shared_ptr<void> owner(client.release().ptr(), &ReleaseWithGil);
  return std::make_shared<CollectiveExecutor>(api, std::move(owner), options);
}

std::chrono::milliseconds Milliseconds(double seconds) {
  if (seconds < 0 || !std::isfinite(seconds) || seconds > 1e9) {
    return std::chrono::milliseconds(int64_t{1} << 40);
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

void DefineModule(py::module_& m) {
  m.doc() =
      "torch.distributed's starling backend (C++); use starling.torch, "
      "which registers it, not this module.";
  // ProcessGroupStarling derives from torch's ProcessGroup binding.
  py::module_::import("torch.distributed");

  py::class_<CollectiveExecutor, std::shared_ptr<CollectiveExecutor>>(
      m, "Executor",
      "The background thread that runs every starling process group's ops "
      "of this process, in call order, on `client` (a "
      "starling._starling.Client, kept alive by it). Each collective may "
      "take timeout_s (the client's timeout) plus 2 s.")
      .def(py::init(&MakeExecutor), py::arg("client"), py::arg("timeout_s"))
      .def("shutdown", &CollectiveExecutor::Shutdown,
           py::call_guard<py::gil_scoped_release>(),
           "Fails the ops not started, waits for the one running and stops "
           "the thread; later ops fail at once. Called before the client "
           "closes.");

  py::class_<ProcessGroupStarling, c10d::ProcessGroup,
             c10::intrusive_ptr<ProcessGroupStarling>>(
      m, "ProcessGroupStarling",
      "A torch.distributed process group over every worker of the Starling "
      "job (client/python/process_group_starling.h).")
      .def(py::init([](std::shared_ptr<CollectiveExecutor> executor, int rank,
                       int size, double timeout_s) {
             py::gil_scoped_release release;
             return ProcessGroupStarling::Create(std::move(executor), rank,
                                                 size, Milliseconds(timeout_s));
           }),
           py::arg("executor"), py::arg("rank"), py::arg("size"),
           py::arg("timeout_s"),
           "Joins the group: a barrier, then every rank's Starling slot. "
           "Raises RuntimeError (the same on every worker) when size is not "
           "the job's number of workers or the ranks are not a permutation.")
      .def_property_readonly("slot_of_rank",
                             &ProcessGroupStarling::slot_of_rank,
                             "The Starling slot of each torch rank.");
}

}  // namespace
}  // namespace torch_backend
}  // namespace starling

PYBIND11_MODULE(_backend, m) { starling::torch_backend::DefineModule(m); }
