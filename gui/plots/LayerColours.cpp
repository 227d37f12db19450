#include "plots/LayerColours.h"

#include "plots/QCustomPlotInclude.h"

#include <algorithm>
#include <numeric>

using namespace hookscope;

namespace {

constexpr int kPaletteColours = 10;

QColor paletteColour(int i) {
  static const QColor colours[kPaletteColours] = {
      QColor(31, 119, 180), QColor(255, 127, 14),  QColor(44, 160, 44),   QColor(214, 39, 40),  QColor(148, 103, 189),
      QColor(140, 86, 75),  QColor(227, 119, 194), QColor(127, 127, 127), QColor(188, 189, 34), QColor(23, 190, 207)};
  return colours[i % kPaletteColours];
}

/// One layer (module, call, kind, output) whatever its rank.
std::string layerId(const SeriesKey& key) {
  return key.module + '/' + std::to_string(key.call) + '/' + std::to_string(int(key.kind)) + '/' +
         std::to_string(key.index);
}

} // namespace

QCPColorGradient LayerColours::placeGradient() {
  QCPColorGradient gradient;
  gradient.clearColorStops();
  gradient.setColorStopAt(0.0, QColor(13, 8, 135));
  gradient.setColorStopAt(0.33, QColor(126, 3, 168));
  gradient.setColorStopAt(0.66, QColor(204, 71, 120));
  gradient.setColorStopAt(1.0, QColor(240, 132, 46));
  return gradient;
}

void LayerColours::setModuleOrder(std::vector<std::string> order) {
  m_order.clear();
  for (std::size_t i = 0; i < order.size(); ++i) m_order.emplace(order[i], i);
}

bool LayerColours::assign(const std::vector<SeriesKey>& layers) {
  m_placeColours.clear();
  if (layers.size() <= std::size_t(kPaletteColours)) return false;
  const auto placeOf = [this](const SeriesKey& key) {
    const auto found = m_order.find(key.module);
    return found == m_order.end() ? m_order.size() : found->second;
  };
  std::vector<std::size_t> byPlace(layers.size());
  std::iota(byPlace.begin(), byPlace.end(), std::size_t(0));
  std::stable_sort(byPlace.begin(), byPlace.end(),
                   [&](std::size_t a, std::size_t b) { return placeOf(layers[a]) < placeOf(layers[b]); });
  QCPColorGradient gradient = placeGradient();  // color() fills its table: not const
  for (std::size_t k = 0; k < byPlace.size(); ++k) {
    const double place = double(k) / double(byPlace.size() - 1);
    m_placeColours[layerId(layers[byPlace[k]])] = QColor::fromRgb(gradient.color(place, QCPRange(0, 1)));
  }
  return true;
}

QColor LayerColours::colour(const SeriesKey& key) {
  const std::string layer = layerId(key);
  const auto placed = m_placeColours.find(layer);
  if (placed != m_placeColours.end()) return placed->second;
  const auto found = m_paletteIndex.emplace(layer, int(m_paletteIndex.size())).first;
  return paletteColour(found->second);
}
