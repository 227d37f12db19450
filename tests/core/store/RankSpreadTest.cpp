// The spread of a value across a job's ranks per step: what "all ranks" draws when ranks are many.
#include "store/RankSpread.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace hookscope;

TEST(RankSpreadTest, MedianLowAndHighPerStep) {
  // Odd count: the middle value; even count: the mean of the middle two.
  const std::vector<std::vector<ScalarPoint>> ranks = {
      {{0, 3}, {1, 10}}, {{0, 1}, {1, 40}}, {{0, 2}, {1, 20}}, {{1, 30}}};
  const auto spread = rankSpread(ranks);
  ASSERT_EQ(spread.size(), 2u);
  EXPECT_EQ(spread[0].step, 0);
  EXPECT_EQ(spread[0].ranks, 3);
  EXPECT_DOUBLE_EQ(spread[0].median, 2);
  EXPECT_DOUBLE_EQ(spread[0].low, 1);
  EXPECT_DOUBLE_EQ(spread[0].high, 3);
  EXPECT_EQ(spread[1].ranks, 4);
  EXPECT_DOUBLE_EQ(spread[1].median, 25);
  EXPECT_DOUBLE_EQ(spread[1].low, 10);
  EXPECT_DOUBLE_EQ(spread[1].high, 40);
}

TEST(RankSpreadTest, StepsAfterTheLastAreLeftOutAndGapsKeepTheirOrder) {
  const std::vector<std::vector<ScalarPoint>> ranks = {{{0, 1}, {2, 1}, {5, 1}}, {{1, 2}, {2, 3}, {6, 2}}};
  const auto spread = rankSpread(ranks, 5);
  ASSERT_EQ(spread.size(), 4u);
  EXPECT_EQ(spread[0].step, 0);
  EXPECT_EQ(spread[1].step, 1);
  EXPECT_EQ(spread[2].step, 2);
  EXPECT_DOUBLE_EQ(spread[2].median, 2);
  EXPECT_EQ(spread[3].step, 5);
}

TEST(RankSpreadTest, ANonFiniteRankMakesTheStepNaN) {
  // A NaN on one rank must not disappear into a calm median.
  const std::vector<std::vector<ScalarPoint>> ranks = {{{0, 1}}, {{0, std::nan("")}}, {{0, 2}}};
  const auto spread = rankSpread(ranks);
  ASSERT_EQ(spread.size(), 1u);
  EXPECT_TRUE(std::isnan(spread[0].median));
  EXPECT_TRUE(std::isnan(spread[0].low));
  EXPECT_TRUE(std::isnan(spread[0].high));
  EXPECT_TRUE(rankSpread({}).empty());
}
