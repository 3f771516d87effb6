// The parsed template: expression and statement trees, immutable after
// parsing and shared by concurrent renders.
#ifndef KVCAST_ENGINE_CHAT_INTERNAL_AST_H_
#define KVCAST_ENGINE_CHAT_INTERNAL_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/chat/internal/value.h"

namespace kvcast {
namespace jinja_internal {

enum class ExprKind {
  kLiteral,     // literal
  kName,        // name
  kList,        // args: items
  kTuple,       // args: items
  kDict,        // args: key, value, key, value, ...
  kGetAttr,     // args[0].name
  kGetItem,     // args[0][args[1]]
  kSlice,       // args[0][args[1]:args[2]:args[3]], absent parts null
  kCall,        // args[0](args[1..], kwargs)
  kFilter,      // args[0] | name(args[1..], kwargs)
  kTest,        // args[0] is [not] name(args[1..], kwargs)
  kNot,         // not args[0]
  kNeg,         // -args[0]
  kPos,         // +args[0]
  kBinary,      // args[0] name args[1]: + - * / // % ** ~
  kAnd,         // args[0] and args[1]
  kOr,          // args[0] or args[1]
  kCompare,     // args[0] ops[0] args[1] ops[1] args[2] ...
  kCondExpr,    // args[1] if args[0] else args[2] (args[2] may be null)
  kBlockValue,  // the rendered body of a {% filter %} or {% set x | f %} block
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

// An assignment target: a name, a tuple of targets, or namespace.attr.
struct Target {
  enum class Kind { kName, kTuple, kNamespaceAttr } kind = Kind::kName;
  std::string name;
  std::string attr;
  std::vector<Target> items;
};

enum class StmtKind {
  kData,         // text
  kPrint,        // expr
  kIf,           // branches (a null condition is the else branch)
  kFor,          // target in expr [if condition]: body else else_body
  kSet,          // target = expr
  kSetBlock,     // target = rendered body, through expr (a filter chain) when set
  kMacro,        // name(params) body
  kCallBlock,    // expr (a call) with caller(params) = body
  kFilterBlock,  // expr (a filter chain over kBlockValue) of body
  kWith,         // with_targets = with_values: body
  kBreak,
  kContinue,
  kGeneration,   // body, rendered as is
};

struct Stmt;
using StmtList = std::vector<std::unique_ptr<Stmt>>;

struct MacroParams {
  std::vector<std::string> names;
  // defaults[i] belongs to names[names.size() - defaults.size() + i].
  std::vector<std::unique_ptr<Expr>> defaults;
};

struct Stmt {
  StmtKind kind = StmtKind::kData;
  int line = 0;
  std::string text;
  std::unique_ptr<Expr> expr;
  std::unique_ptr<Expr> condition;
  Target target;
  std::vector<std::pair<std::unique_ptr<Expr>, StmtList>> branches;
  StmtList body;
  StmtList else_body;
  std::string name;
  MacroParams params;
  std::vector<Target> with_targets;
  std::vector<std::unique_ptr<Expr>> with_values;
};

}  // namespace jinja_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_CHAT_INTERNAL_AST_H_
