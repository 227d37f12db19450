// The SETITEM rewrite keeps the pickle's meaning and leaves other pickles alone.
#include "TestSupport.h"

#include "PickleRewrite.h"

using namespace hookscope;

namespace {

// The bytes of a literal, without its terminating NUL. Literals are split after a hex escape
// that a hex digit follows ("\x00" "a"), or the escape would swallow it.
template <std::size_t N>
std::string bytes(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}

TEST(PickleRewriteTest, OneEntryDictBecomesSetItems) {
  // {"k": 1} as protocol 2: PROTO 2, EMPTY_DICT, BINPUT 0, BINUNICODE "k", BININT1 1, SETITEM, STOP
  const std::string pickle = bytes("\x80\x02}q\x00X\x01\x00\x00\x00kK\x01s.");
  ASSERT_EQ(pickle.size(), 15u);
  EXPECT_EQ(rewriteSetItem(pickle), bytes("\x80\x02}q\x00(X\x01\x00\x00\x00kK\x01u."));
}

TEST(PickleRewriteTest, SetItemByteInsideAStringIsNotTouched) {
  // {"s": "s"}: the 's' characters in the strings must stay.
  const std::string pickle = bytes("\x80\x02}X\x01\x00\x00\x00sX\x01\x00\x00\x00ss.");
  ASSERT_EQ(pickle.size(), 17u);
  EXPECT_EQ(rewriteSetItem(pickle), bytes("\x80\x02}(X\x01\x00\x00\x00sX\x01\x00\x00\x00su."));
}

TEST(PickleRewriteTest, NestedOneEntryDictsGetOneMarkEach) {
  // {"a": {"b": 1}}: the inner SETITEM closes before the outer one.
  const std::string pickle = bytes("\x80\x02}X\x01\x00\x00\x00" "a}X\x01\x00\x00\x00" "bK\x01ss.");
  EXPECT_EQ(rewriteSetItem(pickle), bytes("\x80\x02}(X\x01\x00\x00\x00" "a}(X\x01\x00\x00\x00" "bK\x01uu."));
}

TEST(PickleRewriteTest, PicklesWithoutSetItemOrWithUnknownOpcodesAreUnchanged) {
  const std::string multi = bytes("\x80\x02}(X\x01\x00\x00\x00" "aK\x01X\x01\x00\x00\x00" "bK\x02u.");
  ASSERT_EQ(multi.size(), 22u);
  EXPECT_EQ(rewriteSetItem(multi), multi);
  const std::string dup = bytes("\x80\x02}2K\x01K\x01s.");  // DUP is not followed
  EXPECT_EQ(rewriteSetItem(dup), dup);
  EXPECT_EQ(rewriteSetItem(""), "");
}

} // namespace
