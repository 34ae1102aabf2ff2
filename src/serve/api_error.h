// An error a client gets back as OpenAI's error object:
//   {"error":{"message":"...","type":"invalid_request_error","param":"max_tokens","code":null}}
// with the HTTP status the OpenAI API uses for it (400 bad request, 404 unknown route
// or model, 503 server full or shutting down, 500 the engine failed). A message may
// quote what the client sent (a JSON parser's "last read" bytes, a role name): bytes
// that are not UTF-8 become U+FFFD, so the error object always serialises.
#pragma once
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "engine/utf8.h"

namespace moeflow::serve {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string type = "invalid_request_error", std::string param = "",
           std::string code = "")
      : std::runtime_error(well_formed(message)), status_(status), type_(std::move(type)), param_(std::move(param)),
        code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

  // The body: empty param and code are written as null, as OpenAI does.
  nlohmann::json to_json() const {
    nlohmann::json e;
    e["message"] = what();
    e["type"] = type_;
    e["param"] = param_.empty() ? nlohmann::json(nullptr) : nlohmann::json(param_);
    e["code"] = code_.empty() ? nlohmann::json(nullptr) : nlohmann::json(code_);
    return {{"error", e}};
  }

  static ApiError bad_request(std::string message, std::string param = "", std::string code = "") {
    return ApiError(400, std::move(message), "invalid_request_error", std::move(param), std::move(code));
  }

 private:
  static std::string well_formed(const std::string& s) {
    std::string out;
    utf8::sanitize(s, out, true);
    return out;
  }
  int status_;
  std::string type_, param_, code_;
};

}  // namespace moeflow::serve
