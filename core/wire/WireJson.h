#pragma once
// JSON as the wire writes and reads it (docs/protocol.md): numbers with their non-finite
// spellings, bounded integers and strings from a peer, and messages that never throw on bad
// UTF-8 a peer sent. Everything that parses a peer's message reads its fields through these.

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace hookscope {

/// The longest string field kept from a peer's message (longer ones are cut at a character).
constexpr std::size_t kMaxWireStringBytes = 4096;

/// A number as the wire writes it: finite ones as numbers, others as "nan", "inf", "-inf".
nlohmann::json wireNumberJson(double value);
/// Reads wireNumberJson's form; false when `value` is neither a number nor one of its strings.
bool wireNumberFrom(const nlohmann::json& value, double* out);
/// `j[key]` as an integer in [low, high]; clears `*ok` when it is missing, not an integer or out
/// of range (and returns 0 when missing).
std::int64_t wireInt(const nlohmann::json& j, const char* key, std::int64_t low, std::int64_t high, bool* ok);
/// `j[key]` as a string of at most kMaxWireStringBytes; "" when missing or not a string.
std::string wireString(const nlohmann::json& j, const char* key);
/// A message as compact text; a byte that is not UTF-8 (peer bytes quoted in an error) is
/// replaced instead of throwing.
std::string wireText(const nlohmann::json& j);

} // namespace hookscope
