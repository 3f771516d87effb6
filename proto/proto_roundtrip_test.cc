// Checks that the generated kvcast.v1 C++ code is usable: messages
// round-trip through the wire format, the services in the descriptor pool
// have the expected methods and streaming kinds, and the generated stubs
// talk to the generated service bases over an in-process channel.
#include <memory>
#include <string>

#include <google/protobuf/descriptor.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "kvcast/v1/generation.grpc.pb.h"
#include "kvcast/v1/generation.pb.h"
#include "kvcast/v1/worker.grpc.pb.h"
#include "kvcast/v1/worker.pb.h"

namespace kvcast::v1 {
namespace {

using google::protobuf::DescriptorPool;
using google::protobuf::MethodDescriptor;
using google::protobuf::ServiceDescriptor;

TEST(ProtoRoundTrip, GenerateRequest) {
  GenerateRequest req;
  req.set_model("tiny");
  req.mutable_token_ids()->add_ids(1);
  req.mutable_token_ids()->add_ids(42);
  req.mutable_sampling()->set_temperature(0.5f);
  req.mutable_sampling()->set_top_k(40);
  req.mutable_sampling()->set_seed(7);
  req.set_max_tokens(16);
  req.add_stop("\n\n");
  req.add_stop_token_ids(2);
  req.set_request_id("r-1");
  req.set_tenant("t");

  std::string wire;
  ASSERT_TRUE(req.SerializeToString(&wire));
  GenerateRequest got;
  ASSERT_TRUE(got.ParseFromString(wire));
  EXPECT_EQ(got.model(), "tiny");
  ASSERT_EQ(got.prompt_case(), GenerateRequest::kTokenIds);
  ASSERT_EQ(got.token_ids().ids_size(), 2);
  EXPECT_EQ(got.token_ids().ids(1), 42);
  EXPECT_FLOAT_EQ(got.sampling().temperature(), 0.5f);
  EXPECT_EQ(got.sampling().top_k(), 40);
  EXPECT_EQ(got.sampling().seed(), 7u);
  EXPECT_EQ(got.max_tokens(), 16);
  ASSERT_EQ(got.stop_size(), 1);
  EXPECT_EQ(got.stop(0), "\n\n");
  EXPECT_EQ(got.stop_token_ids(0), 2);
  EXPECT_EQ(got.request_id(), "r-1");
  EXPECT_EQ(got.tenant(), "t");

  // The oneof switches to text.
  got.set_text("hello");
  EXPECT_EQ(got.prompt_case(), GenerateRequest::kText);
  EXPECT_FALSE(got.has_token_ids());
}

TEST(ProtoRoundTrip, DecodeRequest) {
  DecodeRequest start;
  DecodeStart* s = start.mutable_start();
  s->set_request_id("r-2");
  s->add_prompt(5);
  s->add_prompt(6);
  s->set_max_tokens(8);
  s->mutable_kv()->set_prompt_digest(std::string(32, 'a'));
  s->mutable_kv()->set_groups(3);
  s->set_kv_tokens(2);

  std::string wire;
  ASSERT_TRUE(start.SerializeToString(&wire));
  DecodeRequest got;
  ASSERT_TRUE(got.ParseFromString(wire));
  ASSERT_EQ(got.kind_case(), DecodeRequest::kStart);
  EXPECT_EQ(got.start().request_id(), "r-2");
  ASSERT_EQ(got.start().prompt_size(), 2);
  EXPECT_EQ(got.start().prompt(1), 6);
  EXPECT_EQ(got.start().max_tokens(), 8);
  EXPECT_EQ(got.start().kv().prompt_digest(), std::string(32, 'a'));
  EXPECT_EQ(got.start().kv().groups(), 3);
  EXPECT_EQ(got.start().kv_tokens(), 2);

  DecodeRequest first;
  first.set_first_token(99);
  ASSERT_TRUE(first.SerializeToString(&wire));
  ASSERT_TRUE(got.ParseFromString(wire));
  ASSERT_EQ(got.kind_case(), DecodeRequest::kFirstToken);
  EXPECT_EQ(got.first_token(), 99);
}

const MethodDescriptor* FindMethod(const std::string& service,
                                   const std::string& method) {
  const ServiceDescriptor* s =
      DescriptorPool::generated_pool()->FindServiceByName(service);
  if (s == nullptr) return nullptr;
  return s->FindMethodByName(method);
}

TEST(ProtoDescriptors, Services) {
  const MethodDescriptor* m = FindMethod("kvcast.v1.Generation", "Generate");
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(m->client_streaming());
  EXPECT_TRUE(m->server_streaming());
  EXPECT_EQ(m->input_type()->full_name(), "kvcast.v1.GenerateRequest");
  EXPECT_EQ(m->output_type()->full_name(), "kvcast.v1.GenerateResponse");

  m = FindMethod("kvcast.v1.Generation", "GenerateUnary");
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(m->client_streaming());
  EXPECT_FALSE(m->server_streaming());
  EXPECT_EQ(m->output_type()->full_name(), "kvcast.v1.GenerateResult");

  m = FindMethod("kvcast.v1.Decode", "Decode");
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->client_streaming());
  EXPECT_TRUE(m->server_streaming());

  // Progress, then the result: callers bound silence, not the prompt.
  m = FindMethod("kvcast.v1.Prefill", "Prefill");
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(m->client_streaming());
  EXPECT_TRUE(m->server_streaming());
  EXPECT_EQ(m->output_type()->full_name(), "kvcast.v1.PrefillReply");

  for (const char* name : {"Register", "Heartbeat", "Deregister"}) {
    EXPECT_NE(FindMethod("kvcast.v1.Registry", name), nullptr) << name;
  }

  // The generated gRPC code names the same services.
  EXPECT_STREQ(Generation::service_full_name(), "kvcast.v1.Generation");
  EXPECT_STREQ(Decode::service_full_name(), "kvcast.v1.Decode");
}

// A server-streaming Generation and a bidi Decode behind an in-process
// channel: the generated stubs and service bases agree on the wire.
class FakeGeneration final : public Generation::Service {
  grpc::Status Generate(grpc::ServerContext*, const GenerateRequest* req,
                        grpc::ServerWriter<GenerateResponse>* w) override {
    for (int i = 0; i < req->max_tokens(); ++i) {
      GenerateResponse r;
      r.mutable_delta()->add_token_ids(i);
      w->Write(r);
    }
    GenerateResponse fin;
    fin.mutable_final()->set_request_id(req->request_id());
    fin.mutable_final()->set_finish_reason(FINISH_REASON_LENGTH);
    w->Write(fin);
    return grpc::Status::OK;
  }
};

class FakeDecode final : public Decode::Service {
  grpc::Status Decode(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<DecodeResponse, DecodeRequest>* s) override {
    DecodeRequest req;
    while (s->Read(&req)) {
      DecodeResponse r;
      if (req.has_start()) {
        r.set_kv_ready(true);
      } else {
        r.add_token_ids(req.first_token() + 1);
        r.set_finish_reason(FINISH_REASON_STOP);
      }
      s->Write(r);
    }
    return grpc::Status::OK;
  }
};

TEST(ProtoGrpc, InProcess) {
  FakeGeneration gen;
  FakeDecode dec;
  grpc::ServerBuilder builder;
  builder.RegisterService(&gen);
  builder.RegisterService(&dec);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  std::shared_ptr<grpc::Channel> channel =
      server->InProcessChannel(grpc::ChannelArguments());

  {
    auto stub = Generation::NewStub(channel);
    grpc::ClientContext ctx;
    GenerateRequest req;
    req.set_text("hi");
    req.set_max_tokens(3);
    req.set_request_id("r-3");
    auto reader = stub->Generate(&ctx, req);
    GenerateResponse resp;
    int deltas = 0;
    bool final_seen = false;
    while (reader->Read(&resp)) {
      if (resp.has_delta()) {
        EXPECT_FALSE(final_seen);
        EXPECT_EQ(resp.delta().token_ids(0), deltas++);
      } else {
        ASSERT_TRUE(resp.has_final());
        EXPECT_EQ(resp.final().request_id(), "r-3");
        EXPECT_EQ(resp.final().finish_reason(), FINISH_REASON_LENGTH);
        final_seen = true;
      }
    }
    EXPECT_TRUE(reader->Finish().ok());
    EXPECT_EQ(deltas, 3);
    EXPECT_TRUE(final_seen);
  }
  {
    auto stub = Decode::NewStub(channel);
    grpc::ClientContext ctx;
    auto stream = stub->Decode(&ctx);
    DecodeRequest req;
    req.mutable_start()->set_request_id("r-4");
    ASSERT_TRUE(stream->Write(req));
    DecodeResponse resp;
    ASSERT_TRUE(stream->Read(&resp));
    EXPECT_TRUE(resp.kv_ready());
    req.set_first_token(10);
    ASSERT_TRUE(stream->Write(req));
    ASSERT_TRUE(stream->Read(&resp));
    ASSERT_EQ(resp.token_ids_size(), 1);
    EXPECT_EQ(resp.token_ids(0), 11);
    EXPECT_EQ(resp.finish_reason(), FINISH_REASON_STOP);
    ASSERT_TRUE(stream->WritesDone());
    EXPECT_FALSE(stream->Read(&resp));
    EXPECT_TRUE(stream->Finish().ok());
  }
  server->Shutdown();
}

}  // namespace
}  // namespace kvcast::v1
