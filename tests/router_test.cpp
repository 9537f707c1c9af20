// The KServe v2 URL space: every endpoint with and without versions, percent-decoding, the
// query ignored, methods, and paths that are not endpoints.
#include <gtest/gtest.h>

#include "server/router.h"

namespace {

using hg::server::Endpoint;
using hg::server::parse_route;

TEST(Router, CoreEndpoints) {
  EXPECT_EQ(parse_route("/v2").endpoint, Endpoint::ServerMetadata);
  EXPECT_EQ(parse_route("/v2/").endpoint, Endpoint::ServerMetadata);
  EXPECT_EQ(parse_route("/v2/models/m/infer/").endpoint, Endpoint::Infer);
  EXPECT_EQ(parse_route("/v2/health/live").endpoint, Endpoint::Live);
  EXPECT_EQ(parse_route("/v2/health/ready?probe=1").endpoint, Endpoint::Ready);
  auto r = parse_route("/v2/models/digits_mlp");
  EXPECT_EQ(r.endpoint, Endpoint::ModelMetadata);
  EXPECT_EQ(r.model, "digits_mlp");
  EXPECT_FALSE(r.version);
  r = parse_route("/v2/models/m/versions/12/ready");
  EXPECT_EQ(r.endpoint, Endpoint::ModelReady);
  ASSERT_TRUE(r.version);
  EXPECT_EQ(*r.version, "12");
  EXPECT_EQ(parse_route("/v2/models/m/infer").endpoint, Endpoint::Infer);
  EXPECT_EQ(parse_route("/v2/models/m/versions/1/infer").endpoint, Endpoint::Infer);
}

TEST(Router, Extensions) {
  EXPECT_EQ(parse_route("/v2/models/gpt/generate").endpoint, Endpoint::Generate);
  EXPECT_EQ(parse_route("/v2/models/gpt/versions/1/generate_stream").endpoint, Endpoint::GenerateStream);
  EXPECT_EQ(parse_route("/v2/models/m/config").endpoint, Endpoint::ModelConfig);
  auto all = parse_route("/v2/models/stats");
  EXPECT_EQ(all.endpoint, Endpoint::Stats);
  EXPECT_TRUE(all.model.empty());
  auto one = parse_route("/v2/models/m/versions/3/stats");
  EXPECT_EQ(one.endpoint, Endpoint::Stats);
  EXPECT_EQ(one.model, "m");
  EXPECT_EQ(*one.version, "3");
  EXPECT_EQ(parse_route("/v2/repository/index").endpoint, Endpoint::RepositoryIndex);
  auto load = parse_route("/v2/repository/models/bert/load");
  EXPECT_EQ(load.endpoint, Endpoint::RepositoryLoad);
  EXPECT_EQ(load.model, "bert");
  EXPECT_EQ(parse_route("/v2/repository/models/bert/unload").endpoint, Endpoint::RepositoryUnload);
  EXPECT_EQ(parse_route("/metrics").endpoint, Endpoint::Metrics);
}

TEST(Router, PercentDecodingKeepsTraversalVisibleToTheNameCheck) {
  auto r = parse_route("/v2/models/a%20b/infer");
  EXPECT_EQ(r.model, "a b");
  // %2F decodes inside one segment: the model name check (check_model_name) must reject it.
  r = parse_route("/v2/repository/models/..%2F..%2Fetc/load");
  EXPECT_EQ(r.endpoint, Endpoint::RepositoryLoad);
  EXPECT_EQ(r.model, "../../etc");
  EXPECT_EQ(parse_route("/v2/models/%zz/ready").model, "%zz");  // not an escape: kept as is
}

TEST(Router, NotEndpoints) {
  for (const char* t : {"", "v2", "/", "/v1/models/m/infer", "/v2/health", "/v2/health/alive", "/v2/models",
                        "/v2/models//infer", "/v2/models/m/infer//", "/v2/models/m/versions/1/infer/x", "/v2/models/m/predict",
                        "/v2/repository", "/v2/repository/models/m", "/v2/repository/models/m/delete",
                        "/metrics/x", "/v2/models/m/versions"}) {
    auto r = parse_route(t);
    EXPECT_EQ(r.endpoint, Endpoint::Unknown) << t;
    EXPECT_TRUE(r.model.empty()) << t;
  }
}

TEST(Router, OpenAi) {
  EXPECT_EQ(parse_route("/v1/completions").endpoint, Endpoint::Completions);
  EXPECT_EQ(parse_route("/v1/chat/completions/").endpoint, Endpoint::ChatCompletions);
  EXPECT_EQ(parse_route("/v1/models?x=1").endpoint, Endpoint::OpenAiModels);
  EXPECT_TRUE(parse_route("/v1/completions").model.empty()) << "the model is named in the body";
  for (const char* t : {"/v1", "/v1/chat", "/v1/models/gpt", "/v1/engines", "/v1/completions/x"})
    EXPECT_EQ(parse_route(t).endpoint, Endpoint::Unknown) << t;
  EXPECT_STREQ(hg::server::allowed_methods(Endpoint::Completions), "POST");
  EXPECT_STREQ(hg::server::allowed_methods(Endpoint::OpenAiModels), "GET");
  EXPECT_TRUE(hg::server::is_openai(Endpoint::ChatCompletions));
  EXPECT_FALSE(hg::server::is_openai(Endpoint::Generate));
}

TEST(Router, Methods) {
  EXPECT_STREQ(hg::server::allowed_methods(Endpoint::Infer), "POST");
  EXPECT_STREQ(hg::server::allowed_methods(Endpoint::RepositoryIndex), "POST");
  EXPECT_STREQ(hg::server::allowed_methods(Endpoint::GenerateStream), "POST");
  EXPECT_STREQ(hg::server::allowed_methods(Endpoint::Stats), "GET");
  EXPECT_STREQ(hg::server::allowed_methods(Endpoint::Metrics), "GET");
  EXPECT_TRUE(hg::server::is_management(Endpoint::RepositoryUnload));
  EXPECT_FALSE(hg::server::is_management(Endpoint::RepositoryIndex));
}

}  // namespace
