// Sizes and durations as people write them in specs and flags ("80GiB", "500ms").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ib {

// "1024", "64KiB", "1.5 GiB", "80GB" (SI), "1M" (binary). nullopt when not a size.
std::optional<int64_t> parse_bytes(const std::string& text);
// 1073741824 -> "1 GiB", 1536 -> "1.5 KiB", 100 -> "100 B".
std::string format_bytes(double bytes);

// "0.5" (seconds), "500ms", "20us", "2s", "1min". nullopt when not a duration.
std::optional<double> parse_seconds(const std::string& text);
// 0.0123 -> "12.3 ms".
std::string format_seconds(double seconds);

// A finite number, or a percentage of one: "0.05" -> 0.05, "5%" -> 0.05. nullopt otherwise.
std::optional<double> parse_fraction(const std::string& text);

// Engineering-style number: 3 significant digits, no exponent for ordinary magnitudes.
std::string format_number(double value);
// Seconds as milliseconds, as format_number writes them (the tables' and compare's times).
std::string format_ms(double seconds);

}  // namespace ib
