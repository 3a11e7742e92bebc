// A Session run with a wall-clock bound for the fuzz targets: a loaded graph may hold a loop that
// never ends (a legal program: while_loop and ONNX Loop without a trip count), so each run is
// stopped after a second through request_interrupt(), the cancellation a user has too.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "kiln/kiln.h"

namespace kiln_fuzz {

inline void run_bounded(kiln::Session& sess, const std::vector<kiln::Tensor>& fetches,
                        const kiln::FeedDict& feeds) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lk(mu);
    if (!cv.wait_for(lk, std::chrono::seconds(1), [&] { return done; })) kiln::request_interrupt();
  });
  auto finish = [&] {
    {
      std::lock_guard<std::mutex> lk(mu);
      done = true;
    }
    cv.notify_one();
    watchdog.join();
    kiln::clear_interrupt();  // a request no cancellation point took
  };
  try {
    sess.run(fetches, feeds);
  } catch (const kiln::Interrupted&) {
  } catch (...) {
    finish();
    throw;
  }
  finish();
}

}  // namespace kiln_fuzz
