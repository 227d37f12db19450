#include "common/PrintableText.h"

#include <gtest/gtest.h>

using hookscope::cutAtCharacter;
using hookscope::printableText;

TEST(PrintableTextTest, PlainTextAndValidUtf8AreKept) {
  EXPECT_EQ(printableText("layer1.0.conv1: Conv2d"), "layer1.0.conv1: Conv2d");
  EXPECT_EQ(printableText("Gewichte \xc3\xa4\xe2\x9c\x82 \xf0\x9f\x94\xa5"), "Gewichte \xc3\xa4\xe2\x9c\x82 \xf0\x9f\x94\xa5");
  EXPECT_EQ(printableText("line one\n\tline two"), "line one\n\tline two");
}

TEST(PrintableTextTest, TerminalControlsAreEscaped) {
  EXPECT_EQ(printableText("red\x1b[31mtext\x07"), "red\\x1b[31mtext\\x07");
  EXPECT_EQ(printableText("a\rb\x7f"), "a\\x0db\\x7f");
  EXPECT_EQ(printableText("c1 \xc2\x9b" "2J"), "c1 \\x9b2J");  // the one-byte CSI, as UTF-8
  EXPECT_EQ(printableText("evil\xe2\x80\xaetxt.pt"), "evil\\u{202e}txt.pt");
  EXPECT_EQ(printableText("two\nlines", /*multiline=*/false), "two\\x0alines");
  EXPECT_EQ(printableText(std::string("nul\0byte", 8)), "nul\\x00byte");
}

TEST(PrintableTextTest, BytesThatAreNotUtf8AreEscaped) {
  EXPECT_EQ(printableText("\xe7" "arity"), "\\xe7arity");          // a lone lead byte
  EXPECT_EQ(printableText("cut \xe2\x9c"), "cut \\xe2\\x9c");       // a sequence cut off at the end
  EXPECT_EQ(printableText("\xc0\xaf"), "\\xc0\\xaf");               // an overlong '/'
  EXPECT_EQ(printableText("\xed\xa0\x80"), "\\xed\\xa0\\x80");      // a surrogate
  EXPECT_EQ(printableText("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(printableText("\x80\xbf"), "\\x80\\xbf");               // continuation bytes alone
}

TEST(PrintableTextTest, TextIsCutAtACharactersStart) {
  EXPECT_EQ(cutAtCharacter("abc", 5), "abc");
  EXPECT_EQ(cutAtCharacter("abcdef", 3), "abc");
  EXPECT_EQ(cutAtCharacter("a\xc3\xa9z", 2), "a");          // 'é' is not cut in two
  EXPECT_EQ(cutAtCharacter("a\xc3\xa9z", 3), "a\xc3\xa9");
  EXPECT_EQ(cutAtCharacter("\xe2\x82\xac\xe2\x82\xac", 4), "\xe2\x82\xac");  // two euro signs
}
