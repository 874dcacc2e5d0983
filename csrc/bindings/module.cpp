// The only PYBIND11_MODULE of fastcomm: bindings, no logic.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <map>
#include <optional>
#include <torch/extension.h>

#include "algorithms/flat_buffer.h"
#include "algorithms/hierarchical.h"
#include "backend/process_group_fastcomm.h"
#include "core/config.h"
#include "core/device_registry.h"
#include "kernels/cpu/compress_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/reduce.h"
#include "transport/shm/cpu_binding.h"
#include "transport/shm/engine.h"
#include "transport/shm/home_keeping.h"
#include "transport/shm/huge_pages.h"

namespace py = pybind11;

namespace fastcomm {
void bind_bench_loop(py::module& m);  // bench_loop.cpp
}  // namespace fastcomm

namespace {

// Holder that drops the GIL while the backend is destroyed. Destroying a
// backend joins its delegates' worker threads (Gloo's), and those may need the
// GIL to release Python-owned tensors of finished works: destroying with the
// GIL held deadlocks (seen at exit under torchrun). torch binds its own
// backends with the same kind of holder; the layout is one intrusive_ptr, so
// torch's casts to intrusive_ptr<Backend> read it as it does its own.
template <typename T>
class NoGilDestructorHolder {
 public:
  NoGilDestructorHolder() = default;
  NoGilDestructorHolder(const NoGilDestructorHolder&) = default;
  NoGilDestructorHolder(NoGilDestructorHolder&&) noexcept = default;
  NoGilDestructorHolder& operator=(const NoGilDestructorHolder&) = default;
  NoGilDestructorHolder& operator=(NoGilDestructorHolder&&) noexcept = default;
  /* implicit */ NoGilDestructorHolder(c10::intrusive_ptr<T> impl) : impl_(std::move(impl)) {}
  // pybind11 builds holders from the raw pointer of a new object
  // (https://github.com/pybind/pybind11/issues/2957).
  explicit NoGilDestructorHolder(T* impl) : impl_(c10::intrusive_ptr<T>::unsafe_steal_from_new(impl)) {}
  ~NoGilDestructorHolder() {
    if (impl_ && PyGILState_Check()) {
      py::gil_scoped_release release;
      impl_.reset();
    }
  }
  T* get() const noexcept {
    return impl_.get();
  }

 private:
  c10::intrusive_ptr<T> impl_;
};

}  // namespace

PYBIND11_DECLARE_HOLDER_TYPE(T, NoGilDestructorHolder<T>, true)

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "fastcomm's C++ core: the ProcessGroupFastcomm c10d backend and its kernels";
  // The c10d Backend and Store Python types must be registered before ours derive from them.
  py::module_::import("torch.distributed");

  using fastcomm::Config;
  py::class_<Config>(m, "Config",
                     "One process group's configuration (core/config.h), built by fastcomm/_backend.py from "
                     "fastcomm._options.Options and the host plan.")
      .def(py::init<>())
      .def_readwrite("gloo_threads", &Config::gloo_threads)
      .def_readwrite("allreduce_allgather_max_bytes", &Config::allreduce_allgather_max_bytes)
      .def_readwrite("shm", &Config::shm)
      .def_readwrite("shm_spin_budget", &Config::shm_spin_budget)
      .def_readwrite("shm_slot_bytes", &Config::shm_slot_bytes)
      .def_readwrite("shm_oneshot_max_bytes", &Config::shm_oneshot_max_bytes)
      .def_readwrite("shm_async_min_bytes", &Config::shm_async_min_bytes)
      .def_readwrite("shm_allreduce_single_copy_min_bytes", &Config::shm_allreduce_single_copy_min_bytes)
      .def_readwrite("shm_allreduce_single_copy_max_bytes", &Config::shm_allreduce_single_copy_max_bytes)
      .def_readwrite("shm_huge_pages_min_bytes", &Config::shm_huge_pages_min_bytes)
      .def_readwrite("shm_low_precision_arena_min_bytes", &Config::shm_low_precision_arena_min_bytes)
      .def_readwrite("shm_arena_min_bytes", &Config::shm_arena_min_bytes)
      .def_readwrite("shm_bind_cpus", &Config::shm_bind_cpus)
      .def_readwrite("shm_unbound_min_bytes", &Config::shm_unbound_min_bytes)
      .def_readwrite("pipeline_piece_bytes", &Config::pipeline_piece_bytes)
      .def_readwrite("p2p_single_copy_bytes", &Config::p2p_single_copy_bytes)
      .def_readwrite("ranks_per_host", &Config::ranks_per_host)
      .def_readwrite("socket_ifname", &Config::socket_ifname)
      .def_readwrite("host_of_rank", &Config::host_of_rank)
      .def_readwrite("cuda_unavailable_reason", &Config::cuda_unavailable_reason);

  using fastcomm::ProcessGroupFastcomm;
  py::class_<ProcessGroupFastcomm, c10d::Backend, NoGilDestructorHolder<ProcessGroupFastcomm>>(m,
                                                                                               "ProcessGroupFastcomm")
      .def(py::init([](int rank, int size, std::chrono::milliseconds timeout, Config config,
                       c10::intrusive_ptr<c10d::Backend> gloo, c10::intrusive_ptr<c10d::Backend> check,
                       c10::intrusive_ptr<c10d::Backend> nccl, std::shared_ptr<fastcomm::shm::Engine> engine,
                       c10::intrusive_ptr<c10d::Backend> leaders, c10::intrusive_ptr<c10d::Store> failures) {
             fastcomm::Transports transports{std::move(gloo),   std::move(check),   std::move(nccl),
                                             std::move(engine), std::move(leaders), std::move(failures)};
             return NoGilDestructorHolder<ProcessGroupFastcomm>(c10::make_intrusive<ProcessGroupFastcomm>(
                 rank, size, timeout, std::move(config), std::move(transports)));
           }),
           py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("config"), py::arg("gloo"),
           py::arg("check") = py::none(), py::arg("nccl") = py::none(), py::arg("engine") = py::none(),
           py::arg("leaders") = py::none(), py::arg("failures") = py::none(), py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("config", &ProcessGroupFastcomm::config, "The configuration this group was made with.")
      .def_property_readonly("shm_engine", &ProcessGroupFastcomm::shm_engine,
                             "This rank's shared-memory engine (None when the group does not use one).")
      .def(
          "algorithm_names", [](const ProcessGroupFastcomm& pg) { return pg.dispatcher().names(); },
          "Registered algorithms, in the order they are asked.")
      .def(
          "algorithm_counts", [](const ProcessGroupFastcomm& pg) { return pg.dispatcher().counts(); },
          "How many times each algorithm was launched (rewrites count their sub-collectives too).")
      .def(
          "p2p_stats",
          [](const ProcessGroupFastcomm& pg) -> py::object {
            if (!pg.p2p()) return py::none();
            const auto s = pg.p2p()->stats();
            py::dict d;
            d["sent"] = s.sent;
            d["sent_single_copy"] = s.sent_single_copy;
            d["single_copy_refused"] = s.single_copy_refused;
            d["shared_cpu_waits"] = s.shared_cpu_waits;
            return d;
          },
          "Shared-memory send/recv of this rank (None when the group has none): messages sent, those the "
          "receiver read in one copy, single-copy reads this rank's receives were refused, and waits that "
          "yielded to their peer because it last ran on the waiter's CPU.")
      .def(
          "allocate_tensor",
          [](ProcessGroupFastcomm& pg, int64_t numel, at::ScalarType dtype, std::optional<at::Device> device) {
            at::TensorOptions options = at::TensorOptions().dtype(dtype);
            if (device) options = options.device(*device);  // allocateTensor refuses anything but CPU
            return pg.allocateTensor(numel, options);
          },
          py::arg("numel"), py::arg("dtype") = at::kFloat, py::arg("device") = py::none(),
          "A 1-D CPU tensor of `numel` zeros in this rank's shared-memory arena (groups on one host): all_reduce, "
          "all_gather and reduce_scatter_tensor read it in place on the other ranks when every rank passes one "
          "(allreduce_shm_arena, allgather_shm_arena, reduce_scatter_shm_arena). Takes torch's Backend.allocate_tensor "
          "keywords (dtype, device), as FSDP2 passes them.")
      .def(
          "arena_stats",
          [](const ProcessGroupFastcomm& pg) -> py::object {
            if (!pg.arena()) return py::none();
            py::dict d;
            d["blocks"] = pg.arena()->live_blocks();
            d["idle_blocks"] = pg.arena()->idle_blocks();
            d["peer_mappings"] = pg.arena()->peer_mappings();
            return d;
          },
          "This rank's arena (None when the group has none): blocks held by tensors, idle blocks kept for the "
          "next allocation, and peers' blocks it maps.")
      .def(
          "all_reduce_low_precision",
          [](ProcessGroupFastcomm& pg, const at::Tensor& tensor, at::ScalarType dtype, double scale, double limit,
             std::optional<at::Tensor> clamped) {
            fastcomm::LowPrecisionWire wire{dtype, scale, limit, clamped.value_or(at::Tensor())};
            return NoGilDestructorHolder<c10d::Work>(pg.allreduce_low_precision(tensor, std::move(wire)));
          },
          py::arg("tensor"), py::arg("dtype"), py::arg("scale"), py::arg("limit"), py::arg("clamped") = py::none(),
          py::call_guard<py::gil_scoped_release>(),
          "Sums `tensor` (CPU, float) in place over the group, sent as `dtype` (float16/bfloat16): each rank's "
          "values are multiplied by `scale`, finite ones beyond +-limit clamped (counted into `clamped`, a "
          "one-element int64 tensor), rounded to `dtype`, summed in float32 and rounded once (core/collective.h "
          "LowPrecisionWire). Returns the Work.")
      .def_property_readonly("timeout", &ProcessGroupFastcomm::timeout);

  using fastcomm::shm::Engine;
  using fastcomm::shm::Segment;
  py::class_<Engine, std::shared_ptr<Engine>>(m, "ShmEngine",
                                              "One rank's view of its host's shared-memory segment (see engine.h).")
      .def_static(
          "create",
          [](int local_size, size_t slot_bytes, std::vector<int> group_ranks, bool spin, bool check_pids) {
            return std::make_shared<Engine>(Segment::create(local_size, slot_bytes), 0, std::move(group_ranks), spin,
                                            check_pids);
          },
          py::arg("local_size"), py::arg("slot_bytes"), py::arg("group_ranks"), py::arg("spin"), py::arg("check_pids"),
          "Creates the segment (mode 0600, random name) as local rank 0.")
      .def_static(
          "attach",
          [](const std::string& name, uint64_t nonce, int local_rank, size_t slot_bytes, std::vector<int> group_ranks,
             bool spin, bool check_pids) {
            const int local_size = static_cast<int>(group_ranks.size());
            return std::make_shared<Engine>(Segment::attach(name, local_size, slot_bytes, nonce), local_rank,
                                            std::move(group_ranks), spin, check_pids);
          },
          py::arg("name"), py::arg("nonce"), py::arg("local_rank"), py::arg("slot_bytes"), py::arg("group_ranks"),
          py::arg("spin"), py::arg("check_pids"), "Maps the segment `name`, validating its header and nonce.")
      .def_property_readonly("segment_name", &Engine::segment_name)
      .def_property_readonly("nonce", &Engine::nonce)
      .def_property_readonly("local_rank", &Engine::local_rank)
      .def_property_readonly("local_size", &Engine::local_size)
      .def_property_readonly("slot_bytes", &Engine::slot_bytes)
      .def_property_readonly("rounds", &Engine::rounds)
      .def_property_readonly("pulls", &Engine::pulls)
      .def_property_readonly("pieces_taken_over", &Engine::pieces_taken_over)
      .def_property_readonly("moved_by_peer", &Engine::moved_by_peer)
      .def_property_readonly("sleeps", &Engine::sleeps)
      .def_property_readonly(
          "queued_ops", [](Engine& e) { return e.queue().pushed(); },
          "Ops handed to the group's op queue so far (all_reduce of at least shm_async_min_bytes whose caller does "
          "not wait at once; ops issued from a queued op's callback run on the queue's thread without a hand-over).")
      .def_property_readonly("spins", &Engine::spins,
                             "True where the host's ranks have a CPU each: waiters spin before they yield (where "
                             "ranks outnumber CPUs, collective waits spin only while home keeping finds the host "
                             "quiet, and point-to-point waits never do).")
      .def_property_readonly(
          "spin_budget_us",
          [](const Engine& e) { return std::chrono::duration<double, std::micro>(e.spin_budget()).count(); })
      .def_property("follows_spin_budget", &Engine::follows_spin_budget, &Engine::set_follows_spin_budget)
      .def_property_readonly("home_returns", &Engine::home_returns)
      .def_property_readonly("foreign_load", &Engine::foreign_load);
  m.def(
      "set_cpu_binding",
      [](int home_cpu, std::vector<int> cpus, int64_t unbound_min_bytes) {
        fastcomm::shm::set_cpu_binding({home_cpu, std::move(cpus), unbound_min_bytes});
      },
      py::arg("home_cpu"), py::arg("cpus"), py::arg("unbound_min_bytes"),
      "The process is bound to `home_cpu` (< 0: not bound); shared-memory ops of at least `unbound_min_bytes` run "
      "on any of `cpus` (transport/shm/cpu_binding.h). Call while no op runs.");
  m.attr("HOME_QUIET_FOREIGN_SHARE") = fastcomm::shm::kQuietForeignShare;
  using fastcomm::shm::SpinBudget;
  m.attr("SPIN_BUDGET_FLOOR_US") = std::chrono::duration<double, std::micro>(SpinBudget::kFloor).count();
  m.attr("SPIN_BUDGET_CEILING_US") = std::chrono::duration<double, std::micro>(SpinBudget::kCeiling).count();
  m.attr("SPIN_BUDGET_RECENT") = SpinBudget::kRecent;
  m.def(
      "spin_budgets",
      [](const std::vector<double>& waits_us) {
        SpinBudget budget;
        std::vector<double> out;
        for (const double w : waits_us) {
          out.push_back(std::chrono::duration<double, std::micro>(budget.next()).count());
          budget.record(std::chrono::nanoseconds(static_cast<int64_t>(w * 1000.0)));
        }
        out.push_back(std::chrono::duration<double, std::micro>(budget.next()).count());
        return out;
      },
      py::arg("waits_us"),
      "The budget before each of `waits_us` and after the last, for a waiter that saw those waits in turn "
      "(transport/shm/spin_budget.h).");
  m.def(
      "set_home_cpu",
      [](int home_cpu, std::vector<int> cpus) { fastcomm::shm::set_home_cpu(home_cpu, std::move(cpus)); },
      py::arg("home_cpu"), py::arg("cpus"),
      "The process's shared-memory ops return to `home_cpu` while the host's `cpus` are quiet (< 0: never; "
      "transport/shm/home_keeping.h). Call while no op runs.");
  m.def(
      "huge_page_counts",
      [] {
        const auto c = fastcomm::shm::huge_page_counts();
        return std::map<std::string, uint64_t>{{"collapsed_buffers", c.collapsed_buffers},
                                               {"collapsed_bytes", c.collapsed_bytes},
                                               {"refused_buffers", c.refused_buffers}};
      },
      "Tensors this process moved into huge pages for single-copy ops, the bytes moved, and those the kernel "
      "refused, since it started (transport/shm/huge_pages.h).");

  m.def(
      "pipeline_pieces",
      [](size_t max_piece, size_t element, size_t block_bytes, int blocks) {
        return fastcomm::pieces_of(block_bytes,
                                   fastcomm::pipeline_piece_bytes(max_piece, element, block_bytes, blocks));
      },
      py::arg("max_piece"), py::arg("element"), py::arg("block_bytes"), py::arg("blocks"),
      "How many pieces a pipelined hierarchical collective cuts each block of `block_bytes` into "
      "(algorithms/hierarchical.h).");
  m.attr("MAX_PIPELINE_PIECES") = fastcomm::kMaxPipelinePieces;

  using fastcomm::kernels::Isa;
  py::enum_<Isa>(m, "Isa", "Instruction-set levels of the CPU kernels (kernels/cpu/isa.h).")
      .value("baseline", Isa::Baseline)
      .value("avx2", Isa::Avx2)
      .value("avx512", Isa::Avx512);
  m.def("isa_supported", &fastcomm::kernels::isa_supported, py::arg("isa"), "This CPU can run `isa`'s kernels.");
  m.def("best_isa", &fastcomm::kernels::best_isa, "The best instruction-set level this CPU supports.");
  m.def("active_isa", &fastcomm::kernels::active_isa, "The level every CPU kernel family uses now.");
  m.def("set_isa_cap", &fastcomm::kernels::set_isa_cap, py::arg("cap"),
        "Caps the level of every CPU kernel family (tests: run the baseline code on any CPU); avx512 = no cap.");
  m.def(
      "reduce_buffers",
      [](const std::vector<at::Tensor>& sources, at::Tensor out, const std::string& op) {
        using fastcomm::ReduceKind;
        static const std::map<std::string, ReduceKind> kinds{
            {"sum", ReduceKind::Sum},    {"product", ReduceKind::Product}, {"min", ReduceKind::Min},
            {"max", ReduceKind::Max},    {"band", ReduceKind::BitAnd},     {"bor", ReduceKind::BitOr},
            {"bxor", ReduceKind::BitXor}};
        auto kind = kinds.find(op);
        TORCH_CHECK(kind != kinds.end(), "fastcomm reduce_buffers: unknown op '", op, "'");
        TORCH_CHECK(!sources.empty(), "fastcomm reduce_buffers: no sources");
        std::vector<const void*> pointers;
        for (const auto& t : sources) {
          TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == out.scalar_type() &&
                          t.numel() == out.numel(),
                      "fastcomm reduce_buffers: sources must be contiguous CPU tensors shaped and typed like out");
          pointers.push_back(t.data_ptr());
        }
        TORCH_CHECK(out.device().is_cpu() && out.is_contiguous(),
                    "fastcomm reduce_buffers: out must be contiguous CPU");
        fastcomm::kernels::reduce(out.scalar_type(), kind->second, pointers.data(), static_cast<int>(pointers.size()),
                                  out.data_ptr(), out.numel());
      },
      py::arg("sources"), py::arg("out"), py::arg("op"),
      "out = sources[0] op sources[1] op ... in that order, with the CPU reduction kernels at the active level "
      "(tests).");
  m.def(
      "low_precision_sum",
      [](const std::vector<at::Tensor>& sources, at::Tensor out, const std::string& wire, double scale, double limit) {
        TORCH_CHECK(wire == "float16" || wire == "bfloat16",
                    "fastcomm low_precision_sum: wire must be 'float16' or 'bfloat16', got '", wire, "'");
        TORCH_CHECK(!sources.empty(), "fastcomm low_precision_sum: no sources");
        std::vector<const void*> pointers;
        for (const auto& t : sources) {
          TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == out.scalar_type() &&
                          t.numel() == out.numel(),
                      "fastcomm low_precision_sum: sources must be contiguous CPU tensors shaped and typed like out");
          pointers.push_back(t.data_ptr());
        }
        TORCH_CHECK(out.device().is_cpu() && out.is_contiguous(),
                    "fastcomm low_precision_sum: out must be contiguous CPU");
        std::vector<int64_t> clamped(sources.size(), 0);
        fastcomm::compress::low_precision_sum_cpu(pointers.data(), static_cast<int>(pointers.size()), out.scalar_type(),
                                                  wire == "float16" ? at::kHalf : at::kBFloat16, scale, limit,
                                                  out.data_ptr(), out.numel(), clamped.data());
        return clamped;
      },
      py::arg("sources"), py::arg("out"), py::arg("wire"), py::arg("scale"), py::arg("limit"),
      "The low-precision all_reduce's fused sum (kernels/cpu/compress_cpu.h) at the active level (tests): out = "
      "the widened wire-dtype sum of the sources scaled, clamped and rounded; returns how many each source clamped.");

  fastcomm::bind_bench_loop(m);
  m.def("cuda_kernels_compiled", &fastcomm::cuda_kernels_compiled,
        "True when this build compiled fastcomm's CUDA kernels.");
  m.def("pack", &fastcomm::pack, py::arg("tensors"),
        "Concatenate contiguous tensors of one dtype and device into a flat tensor (multi-tensor copy kernel).");
  m.def("unpack", &fastcomm::unpack, py::arg("flat"), py::arg("tensors"),
        "Inverse of pack: copy consecutive pieces of `flat` into `tensors`.");
  m.def("pack_into", &fastcomm::pack_into, py::arg("flat"), py::arg("tensors"),
        "Copy contiguous tensors back to back into the 1-D tensor `flat`.");
}
