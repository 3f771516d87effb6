// FakeCluster: a WorkerRegistry whose workers are in-process FakeWorkers
// (fake_worker.h), registered as real workers register, for tests of the
// scheduler's request orchestration; Eventually, to wait for what they do.
#ifndef KVCAST_SERVICES_SCHEDULER_TESTING_FAKE_CLUSTER_H_
#define KVCAST_SERVICES_SCHEDULER_TESTING_FAKE_CLUSTER_H_

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "services/scheduler/testing/fake_worker.h"
#include "services/scheduler/worker_registry.h"

namespace kvcast::scheduler::testing {

// Waits (at most 5 s) for `pred`: what the fakes did on their own threads.
template <typename Pred>
bool Eventually(Pred pred) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

class FakeCluster {
 public:
  FakeCluster() {
    WorkerRegistry::Options o;
    o.make_channel = [this](const std::string& address) -> std::shared_ptr<grpc::Channel> {
      for (auto& w : workers_) {
        if (w->id() == address) return w->channel();
      }
      return nullptr;
    };
    registry_ = std::make_unique<WorkerRegistry>(std::move(o));
  }

  WorkerRegistry* registry() { return registry_.get(); }

  FakeWorker* Add(const std::string& id, v1::WorkerRole role, FakeScript script = {}) {
    workers_.push_back(std::make_unique<FakeWorker>(id, role, std::move(script)));
    v1::RegisterRequest req = workers_.back()->Registration();
    v1::RegisterResponse resp;
    EXPECT_TRUE(registry_->Register(nullptr, &req, &resp).ok());
    return workers_.back().get();
  }
  FakeWorker* Prefill(const std::string& id, FakeScript script = {}) {
    return Add(id, v1::WORKER_ROLE_PREFILL, std::move(script));
  }
  FakeWorker* Decode(const std::string& id, FakeScript script = {}) {
    return Add(id, v1::WORKER_ROLE_DECODE, std::move(script));
  }
  // A heartbeat from `id` with all its pages free.
  void Heartbeat(const std::string& id) {
    v1::HeartbeatRequest req;
    req.set_worker_id(id);
    req.mutable_load()->set_free_pages(kFakeContext);
    v1::HeartbeatResponse resp;
    ASSERT_TRUE(registry_->Heartbeat(nullptr, &req, &resp).ok());
  }

 private:
  std::vector<std::unique_ptr<FakeWorker>> workers_;
  std::unique_ptr<WorkerRegistry> registry_;
};

}  // namespace kvcast::scheduler::testing

#endif  // KVCAST_SERVICES_SCHEDULER_TESTING_FAKE_CLUSTER_H_
