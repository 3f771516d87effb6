// Relay over real loopback QUIC: fan-out to several subscribers, serving
// from the cache without going upstream, fetches, and unsubscribe.
#include "transport/moqt/relay.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "transport/moqt/testing/moqt_test_util.h"

namespace kvcast::moqt {
namespace {

using testing::AsSpan;
using testing::Bytes;
using testing::ClientHandler;
using testing::CollectingConsumer;
using testing::RelayHarness;
using testing::WaitOnLoop;

const TrackNamespace kNs = {"kvcast", "test"};
const FullTrackName kTrack = {kNs, "t"};
constexpr int kGroups = 4;
constexpr int kObjects = 8;
constexpr size_t kSize = 10000;

// A publisher: a local-origin relay connected to the relay under test,
// counting the requests it serves.
class Origin : public Relay {
 public:
  explicit Origin(quic::EventLoop* loop) : Relay(loop, RelayOptions{}) {
    AddLocalNamespace(kNs);
  }
  void OnSessionReady(MoqtSession* session) override {
    AnnounceTo(session, [this](absl::Status s) { announced = s.ok(); });
  }
  void OnSubscribe(MoqtSession* s, const Subscribe& r, std::shared_ptr<Downstream> d) override {
    ++subscribes;
    Relay::OnSubscribe(s, r, std::move(d));
  }
  void OnFetch(MoqtSession* s, const Fetch& r, std::shared_ptr<Downstream> d) override {
    ++fetches;
    if (refuse_fetches) {
      d->Reject(kErrInternal, "the origin is going away");
      return;
    }
    Relay::OnFetch(s, r, std::move(d));
  }
  void PublishTrack(const FullTrackName& track, int groups) {
    for (int g = 0; g < groups; ++g) {
      for (int o = 0; o < kObjects; ++o) {
        ObjectHeader h;
        h.group = g;
        h.object = o;
        std::string p = Bytes(g, o, kSize);
        PublishObject(track, h, AsSpan(p));
      }
    }
    EndTrack(track);
  }
  bool announced = false;
  bool refuse_fetches = false;
  int subscribes = 0;
  int fetches = 0;
};

Subscribe FromStart(const FullTrackName& track) {
  Subscribe s;
  s.track = track;
  s.filter_type = FilterType::kAbsoluteStart;
  s.start = Location{0, 0};
  return s;
}

void ExpectAllObjects(const CollectingConsumer& c, int groups, int first_group = 0) {
  ASSERT_EQ(c.objects.size(), static_cast<size_t>((groups - first_group) * kObjects));
  for (int g = first_group; g < groups; ++g) {
    for (int o = 0; o < kObjects; ++o) {
      auto it = c.objects.find({g, o});
      ASSERT_NE(it, c.objects.end()) << g << "/" << o;
      EXPECT_EQ(it->second, Bytes(g, o, kSize)) << "payload of " << g << "/" << o;
    }
  }
}

// Each test runs with the relay's connections on its one loop, and spread
// over three loops (the sessions on one, the others bridged to it).
class RelayTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    harness_ = std::make_unique<RelayHarness>(options_, SessionOptions{}, GetParam());
    harness_->thread()->RunSync([&] { origin_ = std::make_unique<Origin>(harness_->loop()); });
    origin_client_ = harness_->Connect(origin_.get());
    ASSERT_NE(origin_client_, nullptr);
    ASSERT_TRUE(WaitOnLoop(harness_->thread(), [&] { return origin_->announced; }));
  }
  void TearDown() override {
    harness_->thread()->RunSync([&] { subscribers_.clear(); });
    harness_.reset();  // closes the clients first
    origin_.reset();
  }
  // Connects a subscriber client and subscribes from the start of `track`.
  std::shared_ptr<CollectingConsumer> SubscribeNew(const FullTrackName& track,
                                                   absl::Status* reply = nullptr) {
    return SubscribeWith(FromStart(track), reply);
  }
  std::shared_ptr<CollectingConsumer> SubscribeWith(const Subscribe& request,
                                                    absl::Status* reply = nullptr) {
    auto handler = std::make_unique<ClientHandler>();
    MoqtClient* client = harness_->Connect(handler.get());
    auto consumer = std::make_shared<CollectingConsumer>();
    bool replied = false;
    harness_->thread()->RunSync([&] {
      auto id = client->session()->Subscribe(
          request, consumer, [&, reply](absl::StatusOr<TrackInfo> info) {
            replied = true;
            if (reply) *reply = info.status();
          });
      EXPECT_TRUE(id.ok());
    });
    EXPECT_TRUE(WaitOnLoop(harness_->thread(), [&] { return replied; }));
    harness_->thread()->RunSync([&] {
      handlers_.push_back(std::move(handler));
      subscribers_.push_back(consumer);
      clients_.push_back(client);
    });
    return consumer;
  }

  RelayOptions options_;
  std::unique_ptr<RelayHarness> harness_;
  std::unique_ptr<Origin> origin_;
  MoqtClient* origin_client_ = nullptr;
  std::vector<std::unique_ptr<ClientHandler>> handlers_;
  std::vector<std::shared_ptr<CollectingConsumer>> subscribers_;
  std::vector<MoqtClient*> clients_;
};

TEST_P(RelayTest, FansOutOneUpstreamSubscriptionToThreeSubscribers) {
  auto a = SubscribeNew(kTrack);
  auto b = SubscribeNew(kTrack);
  auto c = SubscribeNew(kTrack);
  harness_->thread()->RunSync([&] {
    EXPECT_EQ(harness_->relay()->stats().upstream_subscribes, 1u);
    EXPECT_EQ(origin_->subscribes, 1);
    origin_->PublishTrack(kTrack, kGroups);
  });
  ASSERT_TRUE(WaitOnLoop(harness_->thread(), [&] { return a->done && b->done && c->done; }));
  harness_->thread()->RunSync([&] {
    for (auto* s : {a.get(), b.get(), c.get()}) {
      EXPECT_TRUE(s->done_status.ok()) << s->done_status;
      ExpectAllObjects(*s, kGroups);
    }
  });
  // With three loops the origin and the subscribers were spread over all.
  if (GetParam() == 3) {
    EXPECT_EQ(harness_->server()->placed(), (std::vector<uint64_t>{1, 2, 1}));
  }
}

TEST_P(RelayTest, EndedTrackIsServedFromCacheAfterThePublisherLeft) {
  auto first = SubscribeNew(kTrack);
  harness_->thread()->RunSync([&] { origin_->PublishTrack(kTrack, kGroups); });
  ASSERT_TRUE(WaitOnLoop(harness_->thread(), [&] { return first->done; }));
  harness_->Disconnect(origin_client_);
  ASSERT_TRUE(WaitOnLoop(harness_->thread(), [&] {
    return harness_->relay()->stats().upstream_subscribes == 1;
  }));

  absl::Status reply;
  auto late = SubscribeNew(kTrack, &reply);
  EXPECT_TRUE(reply.ok()) << reply;
  ASSERT_TRUE(WaitOnLoop(harness_->thread(), [&] { return late->done; }));
  harness_->thread()->RunSync([&] {
    EXPECT_TRUE(late->done_status.ok()) << late->done_status;
    ExpectAllObjects(*late, kGroups);
    EXPECT_EQ(harness_->relay()->stats().upstream_subscribes, 1u);
    EXPECT_GE(harness_->relay()->stats().served_from_cache, 1u);
    EXPECT_EQ(origin_->subscribes, 1);
  });
}

// A range subscription's normal end is not the track's: a later range goes
// upstream again (it used to be served, empty, from the cache). (Serving a
// range the cache holds whole: KvOverMoqt.RelayServesADroppedPromptFromItsCache,
// whose groups end with END_OF_GROUP markers.)
Subscribe Range(uint64_t first, uint64_t last) {
  Subscribe s = FromStart(kTrack);
  s.filter_type = FilterType::kAbsoluteRange;
  s.start = Location{first, 0};
  s.end_group = last;
  return s;
}

TEST_P(RelayTest, RangeSubscriptionsEndTheirRangeNotTheTrack) {
  auto range = Range;
  auto first = SubscribeWith(range(0, 0));
  harness_->thread()->RunSync([&] { origin_->PublishTrack(kTrack, kGroups); });
  ASSERT_TRUE(WaitOnLoop(harness_->thread(), [&] { return first->done; }));
  harness_->thread()->RunSync([&] { ExpectAllObjects(*first, 1); });

  auto later = SubscribeWith(range(1, kGroups - 1));
  ASSERT_TRUE(WaitOnLoop(harness_->thread(), [&] { return later->done; }));
  harness_->thread()->RunSync([&] {
    EXPECT_TRUE(later->done_status.ok()) << later->done_status;
    ExpectAllObjects(*later, kGroups, /*first_group=*/1);
    EXPECT_EQ(origin_->subscribes, 2);
  });
}

// Two decode workers landing different groups of one track at once (or
// one worker asking for the next group while one lands): each range is its
// own upstream subscription; a range inside the whole track's shares it.
TEST_P(RelayTest, ConcurrentRangeSubscriptionsEachGetTheirGroups) {
  auto head = SubscribeWith(Range(0, 0));
  auto tail = SubscribeWith(Range(1, kGroups - 1));
  auto same_tail = SubscribeWith(Range(1, kGroups - 1));
  harness_->thread()->RunSync([&] {
    EXPECT_EQ(origin_->subscribes, 2) << "one upstream subscription per distinct range";
    origin_->PublishTrack(kTrack, kGroups);
  });
  for (const auto& c : {head, tail, same_tail}) {
    ASSERT_TRUE(WaitOnLoop(harness_->thread(), [&] { return c->done; }));
  }
  harness_->thread()->RunSync([&] {
    EXPECT_TRUE(head->done_status.ok()) << head->done_status;
    EXPECT_TRUE(tail->done_status.ok()) << tail->done_status;
    ExpectAllObjects(*head, 1);
    ExpectAllObjects(*tail, kGroups, /*first_group=*/1);
    ExpectAllObjects(*same_tail, kGroups, /*first_group=*/1);
  });
}

TEST_P(RelayTest, ARangeSharesTheWholeTracksSubscription) {
  auto whole = SubscribeNew(kTrack);
  auto range = SubscribeWith(Range(2, 2));
  harness_->thread()->RunSync([&] {
    EXPECT_EQ(origin_->subscribes, 1);
    origin_->PublishTrack(kTrack, kGroups);
  });
  ASSERT_TRUE(WaitOnLoop(harness_->thread(), [&] { return whole->done && range->done; }));
  harness_->thread()->RunSync([&] {
    ExpectAllObjects(*whole, kGroups);
    ExpectAllObjects(*range, 3, /*first_group=*/2);
  });
}

class RelayPacingTest : public RelayTest {
 protected:
  static constexpr uint64_t kWindow = 16 << 10;
  void SetUp() override {
    options_.send_window_bytes = kWindow;
    RelayTest::SetUp();
  }
  // A subscriber on a loop thread of its own, which the test can stall.
  struct Remote {
    std::unique_ptr<quic::LoopThread> thread = *quic::LoopThread::Start();
    ClientHandler handler;
    std::unique_ptr<MoqtClient> client;
    std::shared_ptr<CollectingConsumer> consumer = std::make_shared<CollectingConsumer>();
    bool replied = false;
  };
  void Start(Remote& r, const Subscribe& request) {
    r.thread->RunSync([&] {
      quic::TlsOptions tls;
      tls.ca_file = harness_->certs().ca_cert;
      tls.server_name = "localhost";
      r.client = *MoqtClient::Connect(r.thread->loop(), "127.0.0.1", harness_->port(), tls,
                                      quic::TransportOptions{}, SessionOptions{}, &r.handler);
    });
    ASSERT_TRUE(WaitOnLoop(r.thread.get(), [&] { return r.handler.ready; }));
    r.thread->RunSync([&] {
      ASSERT_TRUE(r.client->session()
                      ->Subscribe(request, r.consumer, [&](auto) { r.replied = true; })
                      .ok());
    });
    ASSERT_TRUE(WaitOnLoop(r.thread.get(), [&] { return r.replied; }));
  }
  void Stop(Remote& r) {
    r.thread->RunSync([&] { r.client.reset(); });
  }
};

// One subscriber stops reading for 400 ms while the whole track (320 KB)
// arrives: the fast one finishes meanwhile, the relay owes the slow one
// locations, not payloads, and sends them from the cache once it reads.
TEST_P(RelayPacingTest, ASlowSubscriberHoldsAWindowAndDoesNotHoldBackTheOthers) {
  Remote slow, fast;
  Start(slow, FromStart(kTrack));
  Start(fast, FromStart(kTrack));
  std::atomic<bool> stalled{true};
  slow.thread->loop()->Post([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    stalled = false;
  });
  harness_->thread()->RunSync([&] { origin_->PublishTrack(kTrack, kGroups); });
  ASSERT_TRUE(WaitOnLoop(fast.thread.get(), [&] { return fast.consumer->done; }));
  EXPECT_TRUE(stalled) << "the fast subscriber waited for the slow one";
  ASSERT_TRUE(WaitOnLoop(slow.thread.get(), [&] { return slow.consumer->done; }));
  for (Remote* r : {&slow, &fast}) {
    r->thread->RunSync([&] {
      EXPECT_TRUE(r->consumer->done_status.ok()) << r->consumer->done_status;
      ExpectAllObjects(*r->consumer, kGroups);
    });
  }
  harness_->thread()->RunSync([&] {
    const Relay::Stats& st = harness_->relay()->stats();
    EXPECT_GT(st.paced_waits, 0u);
    EXPECT_EQ(st.fell_behind_cache, 0u);
    EXPECT_LE(st.max_queued_bytes, kWindow + kSize + 64) << "of " << kGroups * kObjects * kSize;
  });
  Stop(slow);
  Stop(fast);
}

// A FETCH the relay forwards upstream is paced the same way.
TEST_P(RelayPacingTest, AFetchForwardedUpstreamIsPaced) {
  const FullTrackName fetched = {kNs, "fetched"};
  harness_->thread()->RunSync([&] { origin_->PublishTrack(fetched, kGroups); });
  Remote slow;
  slow.thread->RunSync([&] {
    quic::TlsOptions tls;
    tls.ca_file = harness_->certs().ca_cert;
    tls.server_name = "localhost";
    slow.client = *MoqtClient::Connect(slow.thread->loop(), "127.0.0.1", harness_->port(), tls,
                                       quic::TransportOptions{}, SessionOptions{}, &slow.handler);
  });
  ASSERT_TRUE(WaitOnLoop(slow.thread.get(), [&] { return slow.handler.ready; }));
  slow.thread->RunSync([&] {
    Fetch f;
    f.track = fetched;
    f.start = Location{0, 0};
    f.end = Location{kGroups - 1, 0};
    ASSERT_TRUE(slow.client->session()->Fetch(f, slow.consumer, [](auto) {}).ok());
    slow.thread->loop()->Post([] { std::this_thread::sleep_for(std::chrono::milliseconds(400)); });
  });
  ASSERT_TRUE(WaitOnLoop(slow.thread.get(), [&] { return slow.consumer->done; }));
  slow.thread->RunSync([&] {
    EXPECT_TRUE(slow.consumer->done_status.ok()) << slow.consumer->done_status;
    ExpectAllObjects(*slow.consumer, kGroups);
  });
  harness_->thread()->RunSync([&] {
    const Relay::Stats& st = harness_->relay()->stats();
    EXPECT_EQ(st.upstream_fetches, 1u);
    EXPECT_GT(st.paced_waits, 0u);
    EXPECT_LE(st.max_queued_bytes, kWindow + kSize + 64);
  });
  Stop(slow);
}

// The same with a cache too small to hold what the slow one is owed: it
// ends with TOO_FAR_BEHIND naming the cause; it never silently misses
// objects.
TEST_P(RelayPacingTest, ASubscriberBehindTheCacheEndsWithAnError) {
  harness_.reset();
  origin_.reset();
  options_.cache_bytes = 4 * (kSize + 64) * kObjects / 2;  // two groups
  RelayTest::SetUp();
  Remote slow;
  Start(slow, FromStart(kTrack));
  slow.thread->loop()->Post([] { std::this_thread::sleep_for(std::chrono::milliseconds(400)); });
  harness_->thread()->RunSync([&] { origin_->PublishTrack(kTrack, 2 * kGroups); });
  ASSERT_TRUE(WaitOnLoop(slow.thread.get(), [&] { return slow.consumer->done; }));
  slow.thread->RunSync([&] {
    EXPECT_EQ(slow.consumer->done_status.code(), absl::StatusCode::kAborted);
    EXPECT_NE(slow.consumer->done_status.message().find("PUBLISH_DONE 0x6: the subscriber fell "
                                                        "behind past the relay's cache"),
              std::string::npos)
        << slow.consumer->done_status;
  });
  harness_->thread()->RunSync(
      [&] { EXPECT_EQ(harness_->relay()->stats().fell_behind_cache, 1u); });
  Stop(slow);
}

TEST_P(RelayTest, FetchGoesUpstreamOnceThenComesFromTheCache) {
  const FullTrackName other = {kNs, "fetched"};
  harness_->thread()->RunSync([&] { origin_->PublishTrack(other, kGroups); });
  auto handler = std::make_unique<ClientHandler>();
  MoqtClient* client = harness_->Connect(handler.get());
  for (int round = 0; round < 2; ++round) {
    auto consumer = std::make_shared<CollectingConsumer>();
    absl::StatusOr<TrackInfo> reply = absl::UnknownError("none");
    harness_->thread()->RunSync([&] {
      Fetch f;
      f.track = other;
      f.start = Location{1, 0};
      f.end = Location{2, 0};  // groups 1..2 whole
      ASSERT_TRUE(client->session()->Fetch(f, consumer, [&](auto r) { reply = r; }).ok());
    });
    ASSERT_TRUE(WaitOnLoop(harness_->thread(), [&] { return consumer->done; }));
    harness_->thread()->RunSync([&] {
      ASSERT_TRUE(reply.ok()) << reply.status();
      EXPECT_EQ(reply->largest, (Location{2, kObjects - 1}));
      EXPECT_TRUE(consumer->done_status.ok()) << consumer->done_status;
      ExpectAllObjects(*consumer, 3, /*first_group=*/1);
      EXPECT_EQ(origin_->fetches, 1) << "round " << round;
      EXPECT_EQ(harness_->relay()->stats().upstream_fetches, 1u);
    });
  }
  harness_->thread()->RunSync([&] {
    EXPECT_EQ(harness_->relay()->stats().served_from_cache, 1u);
    handlers_.push_back(std::move(handler));
  });
}

// The publisher fails a FETCH the cache holds only part of (it is going
// away): the relay answers with what it cached from the range's start, a
// prefix the fetcher can use, rather than the error; with nothing cached
// in the range, the error.
TEST_P(RelayTest, AFetchItsPublisherFailsIsAnsweredFromTheCache) {
  const FullTrackName other = {kNs, "partly"};
  harness_->thread()->RunSync([&] { origin_->PublishTrack(other, kGroups); });
  auto handler = std::make_unique<ClientHandler>();
  MoqtClient* client = harness_->Connect(handler.get());
  struct Answer {
    std::shared_ptr<CollectingConsumer> consumer = std::make_shared<CollectingConsumer>();
    absl::StatusOr<TrackInfo> reply = absl::UnknownError("none");
    bool replied = false;
  };
  auto fetch = [&](uint64_t first, uint64_t last) {
    auto a = std::make_shared<Answer>();
    harness_->thread()->RunSync([&] {
      Fetch f;
      f.track = other;
      f.start = Location{first, 0};
      f.end = Location{last, 0};
      ASSERT_TRUE(client->session()
                      ->Fetch(f, a->consumer,
                              [a](auto r) {
                                a->reply = r;
                                a->replied = true;
                              })
                      .ok());
    });
    EXPECT_TRUE(WaitOnLoop(harness_->thread(), [&] { return a->replied && (!a->reply.ok() ||
                                                                         a->consumer->done); }));
    return a;
  };
  auto group0 = fetch(0, 0);  // now cached
  harness_->thread()->RunSync([&] { origin_->refuse_fetches = true; });
  auto partly = fetch(0, 2);
  auto uncached = fetch(1, 2);
  harness_->thread()->RunSync([&] {
    ASSERT_TRUE(partly->reply.ok()) << partly->reply.status();
    EXPECT_EQ(partly->reply->largest, (Location{0, kObjects - 1}));
    EXPECT_TRUE(partly->consumer->done_status.ok()) << partly->consumer->done_status;
    ExpectAllObjects(*partly->consumer, 1);
    EXPECT_EQ(uncached->reply.status().code(), absl::StatusCode::kInternal);
    EXPECT_NE(uncached->reply.status().message().find("going away"), std::string::npos)
        << uncached->reply.status();
    EXPECT_EQ(origin_->fetches, 3);
    EXPECT_EQ(harness_->relay()->stats().upstream_fetches, 3u);
    EXPECT_EQ(harness_->relay()->stats().served_from_cache, 1u);
    handlers_.push_back(std::move(handler));
  });
}

TEST_P(RelayTest, UnknownNamespaceIsRejectedWithTrackDoesNotExist) {
  absl::Status reply;
  SubscribeNew(FullTrackName{{"nobody"}, "x"}, &reply);
  EXPECT_EQ(reply.code(), absl::StatusCode::kNotFound) << reply;
}

TEST_P(RelayTest, LastUnsubscribeEndsTheUpstreamSubscription) {
  auto a = SubscribeNew(kTrack);
  harness_->thread()->RunSync([&] {
    EXPECT_EQ(harness_->relay()->num_subscribers(kTrack), 1u);
    EXPECT_EQ(origin_->num_subscribers(kTrack), 1u);
    clients_[0]->session()->Unsubscribe(0);
  });
  EXPECT_TRUE(WaitOnLoop(harness_->thread(), [&] {
    return harness_->relay()->num_subscribers(kTrack) == 0 &&
           origin_->num_subscribers(kTrack) == 0;
  }));
  harness_->thread()->RunSync([&] {
    EXPECT_EQ(a->done_status.code(), absl::StatusCode::kCancelled);
  });
}

TEST(TrackCacheTest, ChangedPayloadIsRefusedAndTrackMarkedMalformed) {
  TrackCache cache(1 << 20);
  ObjectHeader h;
  h.group = 3;
  h.object = 1;
  std::string a = Bytes(3, 1, 100), b = Bytes(9, 9, 100);
  EXPECT_EQ(cache.Insert(kTrack, h, AsSpan(a)), TrackCache::InsertResult::kInserted);
  EXPECT_EQ(cache.Insert(kTrack, h, AsSpan(a)), TrackCache::InsertResult::kDuplicate);
  EXPECT_FALSE(cache.malformed(kTrack));
  EXPECT_EQ(cache.Insert(kTrack, h, AsSpan(b)), TrackCache::InsertResult::kConflict);
  EXPECT_TRUE(cache.malformed(kTrack));
  std::string seen;
  cache.ForEach(kTrack, {0, 0}, {9, 9}, [&](const ObjectHeader&, const quic::SharedBytes& p) {
    seen.assign(reinterpret_cast<const char*>(p.bytes.data()), p.bytes.size());
  });
  EXPECT_EQ(seen, a);
}

TEST(TrackCacheTest, EvictsLeastRecentlyUsedGroupsWithinBudget) {
  TrackCache cache(10 * (1000 + 64));
  for (uint64_t g = 0; g < 5; ++g) {
    for (uint64_t o = 0; o < 3; ++o) {
      ObjectHeader h;
      h.group = g;
      h.object = o;
      std::string p = Bytes(g, o, 1000);
      cache.Insert(kTrack, h, AsSpan(p));
    }
  }
  EXPECT_LE(cache.bytes(), cache.budget());
  EXPECT_EQ(cache.evicted_groups(), 2u);  // groups 0 and 1 went first
  EXPECT_FALSE(cache.Covers(kTrack, {0, 0}, {0, 2}));
  EXPECT_TRUE(cache.Covers(kTrack, {4, 0}, {4, 2}));
}

// A full cache writes new objects into the memory of evicted ones, and
// counts the spare buffers within its budget.
TEST(TrackCacheTest, EvictedPayloadMemoryIsReusedWithinTheBudget) {
  constexpr size_t kSize = 8192;
  TrackCache cache(7 * (kSize + 64));  // seven objects, spares included
  std::set<const uint8_t*> group0;
  for (uint64_t g = 0; g < 6; ++g) {
    for (uint64_t o = 0; o < 3; ++o) {
      ObjectHeader h;
      h.group = g;
      h.object = o;
      const std::string p = Bytes(g, o, kSize);
      ASSERT_EQ(cache.Insert(kTrack, h, AsSpan(p)), TrackCache::InsertResult::kInserted);
      EXPECT_LE(cache.bytes() + cache.spare_bytes(), cache.budget()) << g << "/" << o;
      std::string seen;
      cache.ForEach(kTrack, {g, o}, {g, o}, [&](const ObjectHeader&, const quic::SharedBytes& s) {
        const absl::Span<const uint8_t> d = s.bytes;
        seen.assign(reinterpret_cast<const char*>(d.data()), d.size());
        if (g == 0) group0.insert(d.data());
        // Object 2/1 finds the cache full: group 0 goes first, and two of
        // its buffers take 2/1 and 2/2.
        if (g == 2 && o >= 1) EXPECT_EQ(group0.count(d.data()), 1u) << "2/" << o;
      });
      EXPECT_EQ(seen, p);
    }
  }
  EXPECT_EQ(cache.evicted_groups(), 4u);
  EXPECT_TRUE(cache.Covers(kTrack, {5, 0}, {5, 2}));
}

// A smaller payload in an evicted object's buffer is charged the buffer's
// capacity: the budget bounds the memory held, not the payload bytes.
TEST(TrackCacheTest, APayloadInALargerBufferIsChargedItsCapacity) {
  constexpr size_t kBig = 8192, kSmall = 5000;
  TrackCache cache(3 * (kBig + 64));
  ObjectHeader h;
  for (uint64_t o = 0; o < 3; ++o) {
    h.object = o;
    const std::string p = Bytes(0, o, kBig);
    ASSERT_EQ(cache.Insert(kTrack, h, AsSpan(p)), TrackCache::InsertResult::kInserted);
  }
  h.group = 1;
  h.object = 0;
  const std::string small = Bytes(1, 0, kSmall);
  ASSERT_EQ(cache.Insert(kTrack, h, AsSpan(small)), TrackCache::InsertResult::kInserted);
  EXPECT_EQ(cache.evicted_groups(), 1u);
  EXPECT_EQ(cache.bytes(), kBig + 64) << "charged its payload, not the buffer holding it";
  // Of group 0's three buffers one holds the payload, one went to make
  // room for it, one is spare.
  EXPECT_EQ(cache.spare_bytes(), kBig);
}

// A payload a stream still holds (shared) outlives its eviction unchanged,
// and its memory is not handed to a new object; once let go it is freed.
TEST(TrackCacheTest, EvictedPayloadAStreamHoldsIsNeitherReusedNorChanged) {
  constexpr size_t kSize = 8192;
  TrackCache cache(2 * (kSize + 64));
  ObjectHeader h;
  const std::string first = Bytes(0, 0, kSize);
  quic::SharedBytes held;
  ASSERT_EQ(cache.Insert(kTrack, h, AsSpan(first), &held), TrackCache::InsertResult::kInserted);
  ASSERT_EQ(held.bytes.size(), kSize);
  std::weak_ptr<const void> watch = held.owner;
  for (uint64_t g = 1; g < 4; ++g) {  // evicts group 0, then reuses what it can
    h.group = g;
    const std::string p = Bytes(g, 0, kSize);
    quic::SharedBytes stored;
    ASSERT_EQ(cache.Insert(kTrack, h, AsSpan(p), &stored), TrackCache::InsertResult::kInserted);
    EXPECT_NE(stored.bytes.data(), held.bytes.data()) << g;
  }
  EXPECT_FALSE(cache.Covers(kTrack, {0, 0}, {0, 0}));
  EXPECT_EQ(std::string(held.bytes.begin(), held.bytes.end()), first);
  held = {};
  EXPECT_TRUE(watch.expired());
}

TEST(TrackCacheTest, CoversNeedsCompleteGroupsOrTheEndOfTrack) {
  TrackCache cache(1 << 20);
  for (uint64_t o = 0; o < 3; ++o) {
    ObjectHeader h;
    h.group = 0;
    h.object = o;
    cache.Insert(kTrack, h, AsSpan(Bytes(0, o, 10)));
  }
  EXPECT_TRUE(cache.Covers(kTrack, {0, 0}, {0, 2}));
  EXPECT_FALSE(cache.Covers(kTrack, {0, 0}, {0, UINT64_MAX}));  // more may come
  cache.MarkEnded(kTrack, std::nullopt);
  EXPECT_TRUE(cache.Covers(kTrack, {0, 0}, {5, UINT64_MAX}));
}

INSTANTIATE_TEST_SUITE_P(LoopThreads, RelayTest, ::testing::Values(1, 3),
                         ::testing::PrintToStringParamName());
INSTANTIATE_TEST_SUITE_P(LoopThreads, RelayPacingTest, ::testing::Values(1, 3),
                         ::testing::PrintToStringParamName());

}  // namespace
}  // namespace kvcast::moqt
