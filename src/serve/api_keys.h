// API keys for `moeflow serve --api-key / --api-key-file`: a server many clients share
// on a network admits only requests that carry one of its keys as
// `Authorization: Bearer KEY` (what OpenAI's clients send from their apiKey). Keys are
// compared in time independent of where they differ, so the answer's timing does not
// spell a key out byte by byte.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace moeflow::serve {

// Checks one key as given on the command line: printable ASCII without spaces (what an
// HTTP header carries). `where` names it in errors. Throws InputError.
void check_api_key(const std::string& key, const std::string& where);

// The keys of a file: one a line, blank lines and lines starting with '#' skipped,
// surrounding white space trimmed. Throws InputError naming the file (and the line)
// when it cannot be read, holds no key or a malformed one.
std::vector<std::string> read_api_keys(const std::string& path);

// Whether an Authorization header's value is "Bearer K" for one of `keys` (the scheme
// case-insensitive, as RFC 9110 has it).
bool authorized(const std::vector<std::string>& keys, std::string_view authorization);

}  // namespace moeflow::serve
