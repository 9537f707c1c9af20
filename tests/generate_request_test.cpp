// The generate request body (server/generate.h, parse_generate_request): every field, and
// errors that name the field (through the one JSON reader for outside text).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "errors.h"
#include "server/generate.h"

using namespace hg;
using namespace hg::server;
using ::testing::HasSubstr;

namespace {

std::string parse_error(const std::string& body) {
  return test::error_of<InvalidArgument>([&] { parse_generate_request(body); });
}

TEST(GenerateRequest, ParsesEveryField) {
  GenerateRequest r = parse_generate_request(
      R"({"id": "7", "text_input": "hi", "parameters": {"max_tokens": 5, "temperature": 0.5, "top_k": 3,
          "top_p": 0.9, "seed": 11, "stop": ["a", "bc"], "timeout": 5000, "stream": true}})");
  EXPECT_EQ(r.id, "7");
  EXPECT_EQ(r.text_input, "hi");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_FALSE(r.sampling.greedy);
  EXPECT_EQ(r.sampling.temperature, 0.5);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_EQ(r.sampling.top_p, 0.9);
  EXPECT_EQ(r.sampling.seed, 11u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(r.timeout_us, 5000u);
  r = parse_generate_request(R"({"text_input": "hi"})");
  EXPECT_FALSE(r.id);
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_TRUE(r.sampling.greedy);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_TRUE(parse_generate_request(R"({"text_input": "hi", "parameters": {"temperature": 0, "top_k": 5}})").sampling.greedy);
  EXPECT_EQ(parse_generate_request(R"({"text_input": "x", "parameters": {"stop": "\n"}})").stop, std::vector<std::string>{"\n"});
}

TEST(GenerateRequest, ErrorsNameTheField) {
  EXPECT_THAT(parse_error("{"), HasSubstr("malformed JSON in the generate request body"));
  EXPECT_THAT(parse_error("[1]"), HasSubstr("the body must be a JSON object"));
  EXPECT_THAT(parse_error(std::string(50, '[') + std::string(50, ']')), HasSubstr("nested deeper than 8 levels"));
  EXPECT_THAT(parse_error(R"({"parameters": {}})"), HasSubstr("field 'text_input' is missing"));
  EXPECT_THAT(parse_error(R"({"text_input": ""})"), HasSubstr("field 'text_input' is empty"));
  EXPECT_THAT(parse_error(R"({"text_input": 5})"), HasSubstr("field 'text_input' must be a string, got 5"));
  EXPECT_THAT(parse_error(R"({"text_input": "a", "id": 3})"), HasSubstr("field 'id' must be a string"));
  EXPECT_THAT(parse_error(R"({"text_input": "a", "inputs": []})"), HasSubstr("field 'inputs' is not a generate request field"));
  EXPECT_THAT(parse_error(R"({"text_input": "a", "parameters": 1})"), HasSubstr("field 'parameters' must be an object"));
  auto param = [](const std::string& p) { return parse_error(R"({"text_input": "a", "parameters": {)" + p + "}}"); };
  EXPECT_THAT(param(R"("max_tokens": 0)"), HasSubstr("field 'parameters.max_tokens' must be >= 1, got 0"));
  EXPECT_THAT(param(R"("max_tokens": 2.5)"), HasSubstr("field 'parameters.max_tokens' must be an integer, got 2.5"));
  EXPECT_THAT(param(R"("max_tokens": 18446744073709551615)"), HasSubstr("'parameters.max_tokens' is 18446744073709551615, too large"));
  EXPECT_THAT(param(R"("temperature": -1)"), HasSubstr("field 'parameters.temperature' must be >= 0"));
  EXPECT_THAT(param(R"("temperature": "hot")"), HasSubstr("field 'parameters.temperature' must be a number"));
  EXPECT_THAT(param(R"("temperature": 1e400)"), HasSubstr("number out of range"));  // beyond double's range
  EXPECT_THAT(param(R"("top_k": -2)"), HasSubstr("field 'parameters.top_k' must be >= 0, got -2"));
  EXPECT_THAT(param(R"("top_p": 0)"), HasSubstr("field 'parameters.top_p' must be in (0, 1], got 0"));
  EXPECT_THAT(param(R"("top_p": 1.5)"), HasSubstr("field 'parameters.top_p' must be in (0, 1]"));
  EXPECT_THAT(param(R"("seed": -1)"), HasSubstr("field 'parameters.seed' must be an integer >= 0, got -1"));
  EXPECT_THAT(param(R"("stop": 3)"), HasSubstr("field 'parameters.stop' must be a string or an array of strings"));
  EXPECT_THAT(param(R"("stop": ["a", 3])"), HasSubstr("field 'parameters.stop[1]' must be a string, got 3"));
  EXPECT_THAT(param(R"("stop": ["a", ""])"), HasSubstr("field 'parameters.stop[1]' is empty"));
  std::string many = R"("stop": [)";
  for (int i = 0; i < 16; ++i) many += R"("a",)";
  EXPECT_THAT(param(many + R"("a"])"), HasSubstr("has 17 strings, at most 16"));
  EXPECT_THAT(param(R"("timeout": -5)"), HasSubstr("field 'parameters.timeout' must be an integer >= 0 (microseconds)"));
  EXPECT_THAT(param(R"("stream": "yes")"), HasSubstr("field 'parameters.stream' must be a boolean"));
  EXPECT_THAT(param(R"("beam_width": 2)"), HasSubstr("field 'parameters.beam_width' is not a generate parameter"));
}

}  // namespace
