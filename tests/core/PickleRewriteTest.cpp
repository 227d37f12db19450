// The SETITEM rewrite keeps the pickle's meaning and leaves other pickles alone.
#include "TestSupport.h"

#include "PickleRewrite.h"

using namespace hookscope;

namespace {

TEST(PickleRewriteTest, OneEntryDictBecomesSetItems) {
  // {"k": 1} as protocol 2: PROTO 2, EMPTY_DICT, BINPUT 0, BINUNICODE "k", BININT1 1, SETITEM, STOP
  const std::string pickle("\x80\x02}q\x00X\x01\x00\x00\x00kK\x01s.", 15);
  const std::string expected("\x80\x02}q\x00(X\x01\x00\x00\x00kK\x01u.", 16);
  EXPECT_EQ(rewriteSetItem(pickle), expected);
}

TEST(PickleRewriteTest, SetItemByteInsideAStringIsNotTouched) {
  // {"s": "s"}: the 's' characters in the strings must stay.
  const std::string pickle("\x80\x02}X\x01\x00\x00\x00sX\x01\x00\x00\x00ss.", 21);
  const std::string out = rewriteSetItem(pickle);
  EXPECT_EQ(out, std::string("\x80\x02}(X\x01\x00\x00\x00sX\x01\x00\x00\x00su.", 22));
}

TEST(PickleRewriteTest, PicklesWithoutSetItemOrWithUnknownOpcodesAreUnchanged) {
  const std::string multi("\x80\x02}(X\x01\x00\x00\x00aK\x01X\x01\x00\x00\x00bK\x02u.", 24);
  EXPECT_EQ(rewriteSetItem(multi), multi);
  const std::string dup("\x80\x02}2K\x01K\x01s.", 10);  // DUP is not followed
  EXPECT_EQ(rewriteSetItem(dup), dup);
  EXPECT_EQ(rewriteSetItem(""), "");
}

} // namespace
