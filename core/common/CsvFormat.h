#pragma once

#include <istream>
#include <string>
#include <vector>

namespace hookscope {

/// A double written so that reading it back gives the same value; "nan", "inf", "-inf".
std::string formatDouble(double value);
/// A CSV field, quoted when it holds a comma, quote, newline or carriage return.
std::string csvField(const std::string& text);
/// The fields of one CSV record (quotes undone; a carriage return outside quotes dropped).
std::vector<std::string> splitCsvLine(const std::string& line);
/// A number as formatDouble writes it, whole (subnormals included); throws std::invalid_argument
/// or std::out_of_range for anything else: trailing text, spaces, hexadecimal, past a double's range.
double parseCsvDouble(const std::string& text);
/// The next record of `in`: a line, or lines joined while a quoted field is open (a name holding
/// a newline is written quoted across lines). `lines` counts the lines read; false at the end.
bool nextCsvRecord(std::istream& in, std::string* record, int* lines);

} // namespace hookscope
