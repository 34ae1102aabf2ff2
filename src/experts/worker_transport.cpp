#include "experts/worker_transport.h"

#include <algorithm>
#include <chrono>

#include "experts/expert_cache.h"

namespace moeflow {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

WorkerTransport::~WorkerTransport() { stop_workers(); }

void WorkerTransport::start_workers(int n) {
  for (int i = 0; i < std::max(1, n); ++i) threads_.emplace_back([this] { worker(); });
}

void WorkerTransport::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void WorkerTransport::submit(const ExpertKey& key, uint8_t* dst, double priority) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push(key, dst, priority);
  }
  work_cv_.notify_one();
}

void WorkerTransport::reprioritize(const ExpertKey& key, double priority) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.set_priority(key, priority);
  for (auto& [k, p] : running_jobs_)
    if (k == key) p = priority;  // a copy that became a demand is not given up
}

bool WorkerTransport::cancel(const ExpertKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.remove(key);
}

void WorkerTransport::collect(std::vector<ExpertKey>& done, bool block) {
  std::unique_lock<std::mutex> lock(mu_);
  if (block) done_cv_.wait(lock, [this] { return !done_.empty() || error_ || (queue_.empty() && running_ == 0); });
  if (error_) std::rethrow_exception(error_);
  done.insert(done.end(), done_.begin(), done_.end());
  done_.clear();
}

double WorkerTransport::now() { return steady_seconds(); }

uint64_t WorkerTransport::bytes_moved() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_moved_;
}

uint64_t WorkerTransport::preemptions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return preemptions_;
}

double WorkerTransport::copy_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return copy_seconds_;
}

bool WorkerTransport::should_yield(const ExpertKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_ < threads_.size()) return false;  // a free worker takes the demand
  const size_t demands = queue_.count_at_least(kDemandPriority);
  if (demands <= yielding_) return false;
  for (const auto& [k, p] : running_jobs_)
    if (k == key && p >= kDemandPriority) return false;
  ++yielding_;
  return true;
}

void WorkerTransport::worker() {
  on_worker_start();
  for (;;) {
    TransferJob job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = *queue_.pop();
      ++running_;
      running_jobs_.push_back({job.key, job.priority});
    }
    std::exception_ptr err;
    bool finished = true;
    const double t0 = steady_seconds();
    try {
      finished = copy(job);
    } catch (...) {
      err = std::current_exception();
    }
    const double dt = steady_seconds() - t0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      copy_seconds_ += dt;
      --running_;
      for (size_t i = 0; i < running_jobs_.size(); ++i)
        if (running_jobs_[i].first == job.key) {
          job.priority = running_jobs_[i].second;
          running_jobs_.erase(running_jobs_.begin() + static_cast<int64_t>(i));
          break;
        }
      if (!finished && !err) {
        --yielding_;
        ++preemptions_;
        queue_.push_back(job);  // this worker takes the demand next
        continue;
      }
      if (err && !error_) error_ = err;
      done_.push_back(job.key);
      if (!err) bytes_moved_ += bytes_of(job.key);
    }
    done_cv_.notify_all();
  }
}

}  // namespace moeflow
