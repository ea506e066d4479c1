// ParamSet: keys bound to struct fields read a point into the struct (values, defaults, parsed
// enums) and refuse a key whose type does not fit its field.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/params.h"

namespace ib {
namespace {

enum class Shade { Light, Dark };

struct Demo {
  int count = -1;
  int64_t bytes = -1;
  double ratio = -1;
  bool on = false;
  std::string name;
  Shade shade = Shade::Light;
};

ParamSet<Demo> demo_set() {
  return ParamSet<Demo>()
      .add(&Demo::count, key_spec("count", ParamType::Int, "a count", Value(int64_t{3}), 1.0))
      .add(&Demo::bytes, key_spec("bytes", ParamType::Bytes, "a size", Value(int64_t{4096})))
      .add(&Demo::ratio, key_spec("ratio", ParamType::Float, "a ratio"))  // required
      .add(&Demo::on, key_spec("on", ParamType::Bool, "a flag", Value(true)))
      .add(&Demo::name, key_spec("name", ParamType::String, "a name", Value(std::string("x"))))
      .add(&Demo::shade, enum_key("shade", "a shade", "light", {"light", "dark"}),
           [](const std::string& s) { return s == "dark" ? Shade::Dark : Shade::Light; });
}

TEST(ParamSet, ReadsThePointsValuesAndTheDefaultsOfTheRest) {
  const ParamSet<Demo> set = demo_set();
  ASSERT_EQ(set.names(), (std::vector<std::string>{"count", "bytes", "ratio", "on", "name", "shade"}));
  Point p;
  p.params = {{"ratio", Value(0.25), ParamType::Float},
              {"count", Value(int64_t{7}), ParamType::Int},
              {"shade", Value(std::string("dark")), ParamType::Enum}};
  const Demo d = set.read(p);
  EXPECT_EQ(d.count, 7);
  EXPECT_EQ(d.bytes, 4096);  // the KeySpec's default, not the struct's -1
  EXPECT_DOUBLE_EQ(d.ratio, 0.25);
  EXPECT_TRUE(d.on);
  EXPECT_EQ(d.name, "x");
  EXPECT_EQ(d.shade, Shade::Dark);
}

TEST(ParamSet, ARequiredKeyMissingFromThePointIsNamed) {
  Point p;
  try {
    (void)demo_set().read(p);
    FAIL() << "expected out_of_range";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("'ratio'"), std::string::npos) << e.what();
  }
}

TEST(ParamSet, RefusesAKeyWhoseTypeDoesNotFitItsField) {
  EXPECT_THROW(ParamSet<Demo>().add(&Demo::count, key_spec("count", ParamType::Float, "")), std::logic_error);
  EXPECT_THROW(ParamSet<Demo>().add(&Demo::ratio, key_spec("ratio", ParamType::Int, "")), std::logic_error);
  EXPECT_THROW(ParamSet<Demo>().add(&Demo::on, key_spec("on", ParamType::Int, "")), std::logic_error);
  EXPECT_THROW(ParamSet<Demo>().add(&Demo::name, key_spec("name", ParamType::Bytes, "")), std::logic_error);
  EXPECT_NO_THROW(ParamSet<Demo>().add(&Demo::ratio, key_spec("ratio", ParamType::Seconds, "")));
}

struct Outer {
  int64_t steps = 0;
  Demo demo;
};

TEST(ParamSet, AGroupsKeysJoinTheSetAndLandInTheMember) {
  const ParamSet<Outer> set = ParamSet<Outer>()
                                  .add(&Outer::steps, key_spec("steps", ParamType::Int, "steps", Value(int64_t{2})))
                                  .add_group(&Outer::demo, demo_set());
  ASSERT_EQ(set.names(), (std::vector<std::string>{"steps", "count", "bytes", "ratio", "on", "name", "shade"}));
  Point p;
  p.params = {{"ratio", Value(0.5), ParamType::Float}, {"name", Value(std::string("y")), ParamType::String}};
  const Outer o = set.read(p);
  EXPECT_EQ(o.steps, 2);
  EXPECT_EQ(o.demo.count, 3);
  EXPECT_DOUBLE_EQ(o.demo.ratio, 0.5);
  EXPECT_EQ(o.demo.name, "y");
  // A name bound twice, by a key or a group, is refused.
  EXPECT_THROW(ParamSet<Outer>().add_group(&Outer::demo, demo_set()).add_group(&Outer::demo, demo_set()), std::logic_error);
  EXPECT_THROW(ParamSet<Demo>(demo_set()).add(&Demo::count, key_spec("count", ParamType::Int, "")), std::logic_error);
}

// A check across keys reads the spec's values by field, typed (a parsed enum as its enum), a
// nested group's field through an accessor, and names the key for the error's location.
TEST(ParamSet, SpecValuesReadEachKeysValuesByItsField) {
  const ParamSet<Outer> set = ParamSet<Outer>()
                                  .add(&Outer::steps, key_spec("steps", ParamType::Int, "steps", Value(int64_t{2})))
                                  .add_group(&Outer::demo, demo_set());
  const SpecKeyValues values({
      {"steps", {Value(int64_t{1}), Value(int64_t{5})}},
      {"shade", {Value(std::string("dark")), Value(std::string("light"))}},
      {"ratio", {Value(0.25)}},
  });
  const SpecValues<Outer> v(set, values);
  const KeyValues<int64_t> steps = v.field(&Outer::steps);
  EXPECT_EQ(steps.key, "steps");
  EXPECT_EQ(steps.values, (std::vector<int64_t>{1, 5}));
  const KeyValues<Shade> shades = v.field([](const Outer& o) -> const auto& { return o.demo.shade; });
  EXPECT_EQ(shades.key, "shade");
  EXPECT_EQ(shades.values, (std::vector<Shade>{Shade::Dark, Shade::Light}));
  const auto ratio = v.field([](const Outer& o) -> const auto& { return o.demo.ratio; });
  EXPECT_EQ(ratio.key, "ratio");
  EXPECT_EQ(ratio.values, std::vector<double>{0.25});
  // Neighbouring fields are told apart (count and bytes follow each other in Demo), and a key the
  // values lack has none.
  EXPECT_EQ(v.field([](const Outer& o) -> const auto& { return o.demo.count; }).key, "count");
  EXPECT_EQ(v.field([](const Outer& o) -> const auto& { return o.demo.bytes; }).key, "bytes");
  EXPECT_TRUE(v.field([](const Outer& o) -> const auto& { return o.demo.name; }).values.empty());
  // The group read alone, from the same values, finds the same keys.
  const ParamSet<Demo> group = demo_set();
  EXPECT_EQ(SpecValues<Demo>(group, values).field(&Demo::shade).values.size(), 2u);
  // A field no key is bound to is a programming error.
  const ParamSet<Demo> partial = ParamSet<Demo>().add(&Demo::count, key_spec("count", ParamType::Int, "c"));
  EXPECT_THROW(SpecValues<Demo>(partial, values).field(&Demo::bytes), std::logic_error);
}

}  // namespace
}  // namespace ib
