// One rank of oneCCL's CPU all_reduce for benchmarks/peers (oneccl.py builds and starts it).
//   oneccl_worker RANK SIZE KVS_FILE SIZES ITERS WARMUP SETTLE_SECONDS ROUND_MS MAX_SAMPLES
// Same method as mpi_worker.py: in-place float32 SUM allreduce; per sample
// oneCCL's own barrier (untimed) and one timed op; each sample's slowest rank
// (a MAX allreduce of all samples after the loop). Rank 0 prints
// RESULT {"bytes": [seconds, ...], ...}. ROUND_MS > 0: more samples after the
// first ITERS until a size's loop lasts about ROUND_MS (rounds.py's rule).
#include <oneapi/ccl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 10) {
    std::fprintf(stderr, "usage: oneccl_worker RANK SIZE KVS_FILE SIZES ITERS WARMUP SETTLE_SECONDS ROUND_MS MAX_SAMPLES\n");
    return 2;
  }
  const int rank = std::atoi(argv[1]), size = std::atoi(argv[2]);
  const std::string kvs_file = argv[3];
  const int iters = std::atoi(argv[5]), warmup = std::atoi(argv[6]);
  const double settle_seconds = std::atof(argv[7]), round_ms = std::atof(argv[8]);
  const int max_samples = std::atoi(argv[9]);
  ccl::init();
  std::shared_ptr<ccl::kvs> kvs;
  if (rank == 0) {
    kvs = ccl::create_main_kvs();
    const auto address = kvs->get_address();
    const std::string tmp = kvs_file + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(reinterpret_cast<const char*>(address.data()), address.size());
    std::rename(tmp.c_str(), kvs_file.c_str());  // whole or absent for the readers
  } else {
    ccl::kvs::address_type address;
    for (int tries = 0;; ++tries) {  // bounded: 60 s
      std::ifstream in(kvs_file, std::ios::binary);
      if (in && in.read(reinterpret_cast<char*>(address.data()), address.size())) break;
      if (tries > 6000) {
        std::fprintf(stderr, "oneccl_worker: no %s after 60 s\n", kvs_file.c_str());
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kvs = ccl::create_kvs(address);
  }
  auto comm = ccl::create_communicator(size, rank, kvs);
  // Settle (as torch_worker.py's _settle): untimed allreduces of one float
  // until rank 0 has seen SETTLE_SECONDS pass.
  const auto settle_start = std::chrono::steady_clock::now();
  for (float flag = 0.0f;;) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - settle_start).count();
    flag = rank == 0 && waited >= settle_seconds ? 1.0f : 0.0f;
    ccl::allreduce(&flag, &flag, 1, ccl::reduction::sum, comm).wait();
    if (flag > 0.0f) break;
  }
  std::string out = "{";
  std::stringstream sizes(argv[4]);
  for (std::string item; std::getline(sizes, item, ',');) {
    const size_t count = std::max<size_t>(1, std::stoull(item) / 4);
    std::vector<float> buf(count, static_cast<float>(rank + 1));
    ccl::allreduce(buf.data(), buf.data(), count, ccl::reduction::sum, comm).wait();
    for (float v : buf) {
      if (v != size * (size + 1) / 2.0f) {
        std::fprintf(stderr, "oneccl_worker: wrong all_reduce result %f\n", v);
        return 1;
      }
    }
    for (int i = 0; i < warmup; ++i) ccl::allreduce(buf.data(), buf.data(), count, ccl::reduction::sum, comm).wait();
    std::vector<double> mine;
    auto take = [&](int k) {
      for (int i = 0; i < k; ++i) {
        ccl::barrier(comm);
        const auto start = std::chrono::steady_clock::now();
        ccl::allreduce(buf.data(), buf.data(), count, ccl::reduction::sum, comm).wait();
        mine.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      ccl::barrier(comm);  // untimed: no rank leaves while a peer still finishes its last op (see torch_worker.py)
    };
    const auto loop_start = std::chrono::steady_clock::now();
    take(iters);
    if (round_ms > 0) {  // rounds.py's more_samples, rank 0's count on every rank
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();
      const double wanted = std::ceil(iters * round_ms / 1e3 / std::max(seconds, 1e-9));
      float extra = rank == 0 ? static_cast<float>(std::max(0.0, std::min(wanted, double(max_samples)) - iters)) : 0.0f;
      ccl::allreduce(&extra, &extra, 1, ccl::reduction::max, comm).wait();
      take(static_cast<int>(extra));
    }
    const int n = static_cast<int>(mine.size());
    ccl::allreduce(mine.data(), mine.data(), n, ccl::reduction::max, comm).wait();
    out += (out.size() > 1 ? ", \"" : "\"") + std::to_string(count * 4) + "\": [";
    for (int i = 0; i < n; ++i) {
      char sample[32];
      std::snprintf(sample, sizeof(sample), "%s%.9g", i ? ", " : "", mine[i]);
      out += sample;
    }
    out += "]";
  }
  if (rank == 0) std::printf("RESULT %s}\n", out.c_str());
  return 0;
}
