// Standard base64 (RFC 4648, '=' padding) for test inputs: TikTokenizer's ranks files hold token bytes so.
#pragma once
#include <string>

namespace hytra::test {

std::string base64(const std::string& bytes);

}  // namespace hytra::test
