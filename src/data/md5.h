// MD5 (RFC 1321), for naming index cache files by the hash of their description, as Megatron does.
#pragma once
#include <string>
#include <string_view>

namespace hytra {

std::string md5_hex(std::string_view data);  // 32 lowercase hex digits

}  // namespace hytra
