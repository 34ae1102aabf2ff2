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
  if (Started* c = started(key)) c->job.priority = priority;  // a copy that became a demand is not given up
}

bool WorkerTransport::cancel(const ExpertKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.remove(key);
}

void WorkerTransport::collect(std::vector<ExpertKey>& done, bool block) {
  std::unique_lock<std::mutex> lock(mu_);
  if (block) done_cv_.wait(lock, [this] { return !done_.empty() || error_ || (queue_.empty() && started_.empty()); });
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
  if (const Started* c = started(key); c && c->job.priority >= kDemandPriority) return false;
  ++yielding_;
  return true;
}

WorkerTransport::Started* WorkerTransport::started(const ExpertKey& key) const {
  for (const auto& c : started_)
    if (c->job.key == key) return c.get();
  return nullptr;
}

bool WorkerTransport::has_piece() const {
  if (!queue_.empty()) return true;
  for (const auto& c : started_)
    if (c->has_unclaimed()) return true;
  return false;
}

WorkerTransport::Piece WorkerTransport::claim_piece(uint64_t last_seq) {
  Started* best = nullptr;
  for (const auto& c : started_)
    if (c->has_unclaimed() && (!best || copies_before(c->job, best->job))) best = c.get();
  // The queue's head starts only as a demand that comes before every started copy, or
  // when no started copy has a piece left.
  const TransferJob* head = queue_.peek();
  if (head && (!best || (head->priority >= kDemandPriority && copies_before(*head, best->job)))) {
    auto c = std::make_unique<Started>();
    c->job = *queue_.pop();
    c->total = bytes_of(c->job.key);
    best = c.get();
    started_.push_back(std::move(c));
  }
  // The worker's previous copy, left unfinished for a demand: pre-empted.
  Started* prev = nullptr;
  for (const auto& c : started_)
    if (c->job.seq == last_seq) prev = c.get();
  if (prev && prev != best && prev->has_unclaimed() && !prev->left_for_demand &&
      prev->job.priority < kDemandPriority && best->job.priority >= kDemandPriority) {
    prev->left_for_demand = true;
    ++preemptions_;
  }
  Piece p{best, best->claimed, best->total == 0 ? 0 : piece_end(best->job.key, best->claimed)};
  best->claimed = p.to;
  best->left_for_demand = false;
  ++best->pieces_running;
  return p;
}

void WorkerTransport::fail(Started* c, std::exception_ptr err) {
  if (!error_) error_ = err;  // collect() throws the first
  c->failed = true;
}

void WorkerTransport::retire(Started* c) {
  if (!c->failed) bytes_moved_ += c->total;
  done_.push_back(c->job.key);
  for (size_t i = 0; i < started_.size(); ++i)
    if (started_[i].get() == c) {
      started_.erase(started_.begin() + static_cast<int64_t>(i));
      break;
    }
}

void WorkerTransport::worker() {
  on_worker_start();
  uint64_t last = kNoCopy;  // submission number of the copy this worker moved a piece of last
  for (;;) {
    Piece p;
    TransferJob job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [this] { return stop_ || has_piece(); });
      if (stop_) return;
      p = claim_piece(last);
      job = p.copy->job;  // the copy stays while a piece of it runs
      ++running_;
      // Pieces left over: another free worker may take one.
      if (p.copy->claimed < p.copy->total || !queue_.empty()) work_cv_.notify_one();
    }
    last = job.seq;
    std::exception_ptr err;
    uint64_t reached = p.to;
    double t0 = steady_seconds();
    try {
      if (p.to > p.from) reached = copy_range(job, p.from, p.to);
    } catch (...) {
      err = std::current_exception();
    }
    bool finishing = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      copy_seconds_ += steady_seconds() - t0;
      Started* c = p.copy;
      --c->pieces_running;
      if (err) {
        fail(c, err);
      } else {
        c->landed += reached - p.from;
        if (reached < p.to) {  // gave way to a demand: the rest waits, its progress kept
          c->claimed = reached;
          c->left_for_demand = true;
          --yielding_;
          ++preemptions_;
          work_cv_.notify_one();
        }
      }
      if (c->failed && c->pieces_running == 0) {
        --running_;
        retire(c);
      } else if (!c->failed && c->landed == c->total) {
        finishing = true;  // every other piece has landed: none is running
      } else {
        --running_;
      }
    }
    if (!finishing) {
      done_cv_.notify_all();
      continue;
    }
    t0 = steady_seconds();
    try {
      finish(job);
    } catch (...) {
      err = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      copy_seconds_ += steady_seconds() - t0;
      --running_;
      Started* c = p.copy;
      if (err) fail(c, err);
      retire(c);
    }
    done_cv_.notify_all();
  }
}

}  // namespace moeflow
